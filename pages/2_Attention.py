"""Attention: maps for one input, averages over the cube, and the effect of one bit flip."""

import streamlit as st

from ui import charts, page, state

selection = page.setup("Attention", icon="👁️")
if selection is None:
    st.stop()
ref, ck, n = selection.ref, selection.ck, selection.n

st.subheader("One input")
how = st.segmented_control("Choose the input", ["Toggle bits", "Cube index", "Random"], default="Toggle bits",
                           key="sv_w_att_how") or "Toggle bits"
if how == "Toggle bits":
    chosen = st.pills("Bits set to 1 (position 0 first)", list(range(n)), selection_mode="multi", key=f"sv_w_att_bits_{n}")
    bits = tuple(int(i in chosen) for i in range(n))
elif how == "Cube index":
    vertex = st.number_input(f"Vertex (0 … {2**n - 1}; position 0 is the most significant bit)", 0, 2**n - 1, 0,
                             key=f"sv_w_att_vertex_{n}")
    bits = state.bits_of_vertex(n, int(vertex))
else:
    seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="sv_w_att_seed")
    bits = state.bits_of_vertex(n, state.random_vertex(n, int(seed)))
flip = st.selectbox("Also show the change when this bit flips", [None, *range(n)], key=f"sv_w_att_flip_{n}",
                    format_func=lambda i: "no flip" if i is None else f"position {i}")
st.markdown(f"Input **x = {''.join(map(str, bits))}** (vertex {state.vertex_of_bits(bits)})")
table, change = state.attention_tables(ref, ck, bits, flip)
st.altair_chart(charts.attention_heatmaps(table, title="attention weights â_ij"))
page.download(table, "attention.csv")
if change is not None:
    st.altair_chart(charts.attention_heatmaps(change, value="change", title=f"change when bit {flip} flips"))
    page.download(change, "attention_change.csv", "Download the change (CSV)")

st.subheader("Averaged over inputs")
weight = st.selectbox("Inputs", [None, *range(n + 1)], key=f"sv_w_att_weight_{n}",
                      format_func=lambda w: "all inputs" if w is None else f"Hamming weight {w}")
with page.progress_bar("Averaging attention over the cube…") as report:
    mean_table, average = state.mean_attention_table(ref, ck, n, weight, progress=report)
page.exactness_note(average.exact, n, state.DEFAULT_SAMPLES, 0)
if weight is not None and average.counts[weight] == 0:
    st.warning(f"No sampled input has Hamming weight {weight}.")
else:
    st.altair_chart(charts.attention_heatmaps(mean_table, title="mean attention weights"))
    page.download(mean_table, "mean_attention.csv")
