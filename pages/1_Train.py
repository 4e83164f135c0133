"""Train: a small transformer trained live on a Boolean function, with the paper's measurements."""

import streamlit as st

import sensviz as sv
from sensviz import tables
from ui import charts, live, page

page.setup("Train", icon="🏋️", needs_model=False)
stopped = live.keep_interrupted()
if stopped is not None:
    st.info(f"Training stopped; the weights of the last measurement are kept as **{stopped.name}** (now selected).")

st.markdown("Train a transformer on fresh uniform bit strings every step (AdamW, the paper's setup), measuring "
            "loss, accuracy, sharpness, LayerNorm blowup and the parameter norm as it learns.")
with st.form("sv_train_form"):
    cols = st.columns(4)
    name = cols[0].selectbox("Task", list(sv.tasks.TASKS), key="sv_w_train_task")
    n = cols[1].number_input("Input length n", 1, live.MAX_LIVE_N, 8, key="sv_w_train_n")
    arch = cols[2].selectbox("Architecture", live.ARCHITECTURES, key="sv_w_train_arch",
                             help="encoder: the paper's experimental model; formal: its theoretical one")
    seed = cols[3].number_input("Seed", 0, 2**31 - 1, 0, key="sv_w_train_seed")
    cols = st.columns(4)
    k = cols[0].number_input("k (sparse parity)", 1, live.MAX_LIVE_N, 3, key="sv_w_train_k")
    task_seed = cols[1].number_input("Task seed (sparse, random)", 0, 2**31 - 1, 0, key="sv_w_train_task_seed")
    table = cols[2].text_input("Truth table (table task)", "0110", key="sv_w_train_table",
                               help="2**n characters 0/1 in vertex order (position 0 is the most significant bit)")
    cols = st.columns(4)
    d_model = cols[0].select_slider("d_model", [8, 16, 32, 64, 128], value=32, key="sv_w_train_d")
    n_layers = cols[1].number_input("Layers", 1, 6, 2, key="sv_w_train_layers")
    n_heads = cols[2].number_input("Heads", 1, 8, 2, key="sv_w_train_heads")
    batch_size = cols[3].select_slider("Batch size", [32, 64, 128, 256, 512, 1024], value=256, key="sv_w_train_batch")
    cols = st.columns(4)
    steps = cols[0].number_input("Steps", 1, 100_000, 1500, step=100, key="sv_w_train_steps")
    lr = cols[1].number_input("Learning rate", 0.0, 1.0, 9e-4, step=1e-4, format="%.5f", key="sv_w_train_lr")
    weight_decay = cols[2].number_input("Weight decay", 0.0, 10.0, 0.1, step=0.05, key="sv_w_train_wd")
    every = cols[3].number_input("Measure every … steps", 1, 10_000, 100, key="sv_w_train_every")
    cols = st.columns(4)
    loss = cols[0].radio("Loss", ["mse", "bce"], horizontal=True, key="sv_w_train_loss",
                         help="mse on {0,1} targets is the paper's default; bce trains logits")
    pm1 = cols[1].checkbox("±1 targets (mse)", key="sv_w_train_pm1")
    submitted = st.form_submit_button("Train", type="primary")

stop_slot = st.empty()
progress_slot = st.empty()
charts_slot = st.empty()
degrees_slot = st.empty()


def show(records):
    charts_slot.altair_chart(charts.training_curves(tables.training_table(records), "measurements during training"))
    degrees = tables.degree_history_table(records)
    if not degrees.empty:
        degrees_slot.altair_chart(charts.degree_history(degrees, "Fourier degree profile of the model: which degrees are learned when"))


if submitted:
    label = {"sparse_parity": f"sparse_parity:k={k},seed={task_seed}", "random": f"random:seed={task_seed}",
             "table": f"table:{table.strip()}"}.get(name, name)
    request = live.TrainRequest(task=label, n=int(n), arch=arch, d_model=int(d_model), n_layers=int(n_layers),
                                n_heads=int(n_heads), steps=int(steps), batch_size=int(batch_size), lr=float(lr),
                                weight_decay=float(weight_decay), loss=loss, pm1_targets=bool(pm1), seed=int(seed),
                                every=int(every))
    try:
        live.prepare(request)
    except ValueError as err:
        st.error(f"Cannot train with these settings: {err}")
        st.stop()
    stop_slot.button("Stop and keep what was learned", key="sv_w_train_stop")
    bar = progress_slot.progress(0.0, text="starting…")
    ref = live.run(request, show, lambda fraction, text: bar.progress(min(fraction, 1.0), text=text))
    st.rerun()

last = live.last_run()
if last is not None and last["status"] == "finished":
    reason = last["reason"]
    message = f"**{last['name']}**: {reason} after {last['step']:,} steps"
    message += f" in {last['seconds']:.1f} s." if last.get("seconds") else "."
    (st.warning if reason.startswith("diverged") else st.success)(
        message + " It is selected in the sidebar (source *Trained here*); the other pages now show it."
    )
    show(last["records"])
    history = tables.training_table(last["records"])
    page.download(history, "training_measurements.csv")
    st.download_button("Download the trained checkpoint (.safetensors)", last["bytes"],
                       file_name=f"{last['name']}.safetensors", mime="application/octet-stream", key="sv_w_train_download")
