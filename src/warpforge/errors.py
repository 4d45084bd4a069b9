"""One exception tree for warpforge's own failures.

A candidate kernel that fails (does not compile, is wrong, hangs, cheats) is *data*: it
becomes an `EvalResult` with a status, never an exception. These exceptions are for our
failures and the user's: a bad path, a malformed task, a missing toolchain.

    WarpforgeError                 base; `str(e)` is one sentence that says what to do
     ├── UsageError                bad arguments or paths          (CLI exit code 2)
     │    ├── TaskError            a task file that cannot be used (CLI exit code 2)
     │    └── ConfigError          invalid configuration values    (CLI exit code 2)
     ├── HarnessError              the evaluator itself broke      (CLI exit code 1)
     │    └── WorkerLost           an executor's worker died mid-job (becomes a `crashed` result)
     ├── LLMError                  an LLM request failed for good  (CLI exit code 1)
     ├── Rejected                  inside a candidate's process only: the candidate broke a rule;
     │                             it becomes the child's "rejected" message, never leaves it
     ├── MisshapenOutputs          inside a candidate's process only: forward()'s outputs are not
     │                             the reference's count, shape or dtype ("wrong_outputs" message)
     └── CandidateFault            inside a candidate's process only: the harness found a fault in
                                   the candidate (no ModelNew class); a "runtime_error" message
"""


class WarpforgeError(Exception):
    """Base of every error warpforge raises on purpose."""

    exit_code = 1


class UsageError(WarpforgeError):
    """The user asked for something impossible: a missing file, an unknown option value."""

    exit_code = 2


class TaskError(UsageError):
    """A task file is malformed: missing `Model`/`get_inputs`, import error, non-tensor inputs."""


class ConfigError(UsageError):
    """A configuration value is out of range or of the wrong type."""


class HarnessError(WarpforgeError):
    """The harness could not do its job (e.g. the reference process crashed); not the candidate's fault."""


class WorkerLost(HarnessError):
    """An executor's worker died or disconnected while running a job; the pool turns it into an
    ordinary `crashed` result at stage `executor` (or retries the job elsewhere)."""


class LLMError(WarpforgeError):
    """An LLM request failed for good: retries exhausted, or refused (HTTP 4xx). One sentence."""


class Rejected(WarpforgeError):
    """Raised in a candidate's process when the candidate did something the policy forbids; the
    message says what. The process reports it as a "rejected" message; it never reaches the parent."""


class MisshapenOutputs(WarpforgeError):
    """Raised in a candidate's process when forward() returned outputs that cannot be the
    reference's (their count, a non-tensor, a shape or dtype), before the harness touches them."""


class CandidateFault(WarpforgeError):
    """Raised in a candidate's process for a fault the harness found in the candidate's code (no
    ModelNew class), as opposed to an exception the candidate's code raised."""
