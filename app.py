"""sensviz explorer: the Streamlit entry point (`streamlit run app.py`)."""

import streamlit as st

st.set_page_config(page_title="sensviz", page_icon="🧭", layout="wide")
st.title("sensviz")
st.markdown(
    "Explore the loss-landscape theory of Hahn & Rofin, *Why are Sensitive Functions Hard for "
    "Transformers?* (ACL 2024), on real models: sensitivity on the Hamming cube, LayerNorm blowup, "
    "sharpness and attention. The pages of the explorer are being built; the `sensviz` library and "
    "command line are usable now (see the README)."
)
