"""The pieces of ``bench/bench_accuracy.py``: problems (data, models, seeds), torch and tf-keras runs, report."""
