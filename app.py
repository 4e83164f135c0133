"""sensviz explorer, the home page: `streamlit run app.py`.

Every page is a thin script over the `sensviz` core: widgets -> `ui.state` (cached core calls)
-> `ui.charts`. The sidebar (`ui.page.sidebar`) picks the model all pages look at.
"""

import streamlit as st

from ui import page

selection = page.setup("sensviz", needs_model=False)
st.markdown(
    "Explore the loss-landscape theory of Hahn & Rofin, *Why are Sensitive Functions Hard for Transformers?* "
    "(ACL 2024) on real models. Transformers whose output is **sensitive** to many input bits can only "
    "represent such functions with large parameters or large **LayerNorm blowup**, which puts them in "
    "**sharp**, isolated minima — why PARITY is hard and FIRST, MEAN and MAJORITY are easy."
)
st.markdown(
    """
**Start here:** pick a model in the sidebar — a pretrained checkpoint, your own `.safetensors` upload
(sensviz checkpoints or state dicts saved by the authors' code), or a model you train on the **Train** page.
Then look at it on the pages:

| page | shows |
|---|---|
| **Train** | train a small transformer live on PARITY, MAJORITY, FIRST, MEAN, sparse or random functions |
| **Attention** | attention maps for any input, averaged over the cube or by Hamming weight, and how one bit flip changes them |
| **Sensitivity** | s(f,x) on every vertex of the Hamming cube, model vs. target; the Fourier degree profile |
| **LayerNorm** | the factors N_i^(k), their blowup, and the paper's norm/blowup trade-off |
| **Landscape** | sharpness with error bars, loss slices, Hessian curvature |
| **Experiments** | the paper's experiments as sweeps: shipped quick-scale results or your own, as figures and data |
| **About** | the theory in brief and the glossary |
"""
)
if selection is not None:
    st.success(f"Selected: **{selection.ref.name}** — open a page on the left to look at it.")
