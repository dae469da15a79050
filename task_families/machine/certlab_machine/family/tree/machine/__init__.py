"""A small integer expression interpreter: tokenizer, parser, evaluator, and an api over all three."""
