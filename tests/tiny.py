"""A tiny, randomly initialised chat model built on the spot (no download): a byte-level BPE
tokenizer trained on a few sentences, with a ChatML chat template, and a 2-layer Llama."""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

CORPUS = [
    "What is 3 + 4? 3 + 4 = 7. The answer is 7.",
    "Please act as an impartial judge and evaluate the quality of the response to the instruction.",
    'Output only a JSON object of the form {"score": N}, where N is an integer from 1 to 10.',
    "Tom has 5 apples and gets 2 more. How many apples does Tom have now?",
    "You are a helpful AI assistant. [Instruction] [Response] [End of response]",
    '0 1 2 3 4 5 6 7 8 9 10 + - * / = ? . , : { } " score',
]


def build_tiny_model(
    folder: str | Path, seed: int = 0, layers: int = 2, hidden: int = 32, context: int = 1024
) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    if (folder / "config.json").exists():
        return folder
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
