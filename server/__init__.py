"""The class server: what the explorer's server holds for its users, beside the science library
(`sensviz`, which never imports this package) and under the Streamlit pages (`ui`, `pages`; this
package never imports Streamlit or `ui`).

- `services`: the server's one-per-process objects (its folders, the kept-model store, the classes,
  the job manager) and the order in which their locks may be taken;
- `jobs` (the training-job queue: a cap, fair turns, budgets, recovery after a restart), `worker`
  (one training run in its own process, forked from the launcher), `budget` (what a run will cost,
  checked before it is queued);
- `kept` (the kept-model store: quotas per owner, a cap, a TTL), `owners` (signed owner ids);
- `classes` (a class: members, its gallery, its jobs), `assignments` (the class's shared experiment
  and its verdict).
"""
