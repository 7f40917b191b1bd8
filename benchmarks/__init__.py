"""Speed and memory of attention: naive vs chunked, NumPy vs PyTorch.

Run ``python -m benchmarks`` (or ``make bench``) from the repository root;
``python -m benchmarks --help`` lists the options. Results go to
``benchmarks/results/`` (a markdown table, a CSV and a log-log plot).

Modules:

* :mod:`benchmarks.methods`  — what is measured: each attention implementation;
* :mod:`benchmarks.probe`    — peak resident memory of one call, in a fresh process;
* :mod:`benchmarks.machine`  — CPU, BLAS and thread information printed with every run;
* :mod:`benchmarks.report`   — tables, CSV, plot and fitted exponents;
* :mod:`benchmarks.cli`      — the command line that ties them together.

Time and ``tracemalloc`` memory come from :mod:`attnlib.measure`, which lessons
can use too.
"""
