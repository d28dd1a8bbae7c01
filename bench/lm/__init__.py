"""The character-level language-model benchmark (``python -m bench.bench_lm``): data, model, training,
the pruning arms per framework, records and the report."""
