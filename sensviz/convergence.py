"""The paper's convergence filter, its thresholds written once: what "kept" means for every table, figure and page.

A run is kept when its final evaluation has MSE below `CONVERGED_MSE` on {0,1} targets (four times that on ±1
targets, the same fit on twice the scale) and, for a Boolean task, accuracy 1 (`sensviz.experiments.meets_filter`,
`sensviz.claims.threshold`); a scratchpad model when its autoregressive accuracy is above
`CONVERGED_AUTOREGRESSIVE`.
"""

CONVERGED_MSE = 1e-3
"""The paper's convergence filter: final evaluation MSE below this ({0,1} targets)."""
CONVERGED_AUTOREGRESSIVE = 0.999
"""The scratchpad figure's filter: autoregressive accuracy above this."""
MSE_RULE = f"final evaluation MSE < {CONVERGED_MSE:g}, the paper's filter"
"""The filter in words, as the figures' notes say which runs they kept."""
