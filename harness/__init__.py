"""The fixed, trusted half of every experiment: data, tokenizer, loader, scoring and the runner."""
