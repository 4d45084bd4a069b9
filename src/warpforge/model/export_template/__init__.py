"""The files of a package that `warpforge model export` writes (model/export.py copies them):
`runtime.py` becomes the package's `__init__.py`. They import nothing from warpforge: the
exported package needs torch and nothing else. `_guard.py` beside it is written at export time
from model/apply.py's own call matcher, so the package guards calls exactly as `warpforge.apply` does.
"""
