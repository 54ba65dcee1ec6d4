"""Experiments: the comparisons the CLI prints, callable from Python with the same result.

This layer sits above the theory (``amp_attention.solvers``) and the finite-d
algorithms; the CLI is a thin shell over it (parse, one call here, print).

* :func:`.gamp_vs_se.compare_gamp_with_se` -- GAMP on one data set beside the
  SE iterates and fixed point (``amp-attention amp``);
* :func:`.quickstart.run_quickstart` -- the SE curve of a problem over alpha
  with finite-d ERM at some of the alphas (``amp-attention quickstart``);
* :func:`.thresholds.threshold_grid` / :func:`.thresholds.thresholds_of` --
  alpha_interp and alpha_PR, alone or along a grid (``amp-attention thresholds``);
* :func:`.scaling.run_scaling_experiment` -- power-law targets along log alpha
  with the fitted exponents (``amp-attention scaling``).
"""
