"""A tiny randomly initialised causal LM and a tokenizer trained on the fly — no downloads.

For testing the training pipeline end to end on a CPU (and for a GPU smoke run): the tokenizer
is a byte-level BPE trained on the suite's task files and the prompt templates, the model a
2-layer Llama of hidden size 64. It writes nothing but its own folder.
"""

from __future__ import annotations

from pathlib import Path

from warpforge.errors import UsageError


def corpus() -> list[str]:
    """Task sources and prompt templates: the text these prompts and completions are made of."""
    from warpforge.propose import prompts
    from warpforge.task import suite_paths

    texts = [p.read_text() for p in suite_paths()]
    template_dir = Path(prompts.__file__).parent / "prompts"
    texts += [p.read_text() for p in sorted(template_dir.glob("*.j2"))]
    return texts


def build(out_dir: str | Path, vocab_size: int = 1024, hidden: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """Save a tokenizer and a random LlamaForCausalLM to `out_dir`; returns the folder."""
    try:
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    except ImportError:
        raise UsageError("training needs the train extra: pip install 'warpforge[train]'") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192, pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(out)
    return out
