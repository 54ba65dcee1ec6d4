"""Experiments: the comparisons the CLI prints, callable from Python with the same result.

This layer sits above the theory (``amp_attention.solvers``) and the finite-d
algorithms; the CLI is a thin shell over it (parse, one call here, print).  Every
resumable sweep (many tasks through :mod:`amp_attention.runner`, an output directory
of checkpoints) lives here (docs/architecture.md "How to add a sweep").

* :func:`.gamp_vs_se.compare_gamp_with_se` -- GAMP on one data set beside the
  SE iterates and fixed point (``amp-attention amp``);
* :func:`.quickstart.run_quickstart` -- the SE curve of a problem over alpha
  with finite-d ERM at some of the alphas (``amp-attention quickstart``);
* :func:`.thresholds.threshold_grid` / :func:`.thresholds.thresholds_of` --
  alpha_interp and alpha_PR, alone or along a grid (``amp-attention thresholds``);
* :func:`.scaling.run_scaling_experiment` -- power-law targets along log alpha
  with the fitted exponents (``amp-attention scaling``; the resumable chains of
  :func:`.scaling.run_scaling`);
* :func:`.validate.run_validation` -- the SE curve against Adam-trained layers over
  (alpha, d, seed) (``amp-attention validate``);
* :func:`.spectrum_check.run_spectrum_check` -- predicted spectra against trained ones
  (``amp-attention spectrum --simulate``);
* :func:`.phase_diagram.run_phase_diagram` / :func:`.phase_diagram.bayes_baseline` --
  the SE over an alpha x lam grid and its Bayes-optimal baseline
  (``amp-attention phase-diagram``);
* :func:`.compare.run_compare` -- ERM, ERM at the best lam and the Bayes-optimal
  estimator over alpha (``amp-attention compare``).
"""
