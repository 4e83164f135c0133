"""About: the paper (a link and its citation), the theory in brief with its formulas, and what each chart shows."""

import streamlit as st

from sensviz import glossary
from ui import router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "About",
    "section": "Reference",
    "icon": ":material/menu_book:",
    "shows": "the theory with its formulas, and a glossary of the charts",
}

PAPER = "https://aclanthology.org/2024.acl-long.800"
CITATION = ("Michael Hahn and Mark Rofin. 2024. Why are Sensitive Functions Hard for Transformers? In *Proceedings "
            "of the 62nd Annual Meeting of the Association for Computational Linguistics (Volume 1: Long Papers)*, "
            "pages 14973–15008, Bangkok, Thailand. Association for Computational Linguistics.")
BIBTEX = """@inproceedings{hahn-rofin-2024-sensitive,
  title = "Why are Sensitive Functions Hard for Transformers?",
  author = "Hahn, Michael and Rofin, Mark",
  booktitle = "Proceedings of the 62nd Annual Meeting of the Association for Computational Linguistics (Volume 1: Long Papers)",
  month = aug,
  year = "2024",
  address = "Bangkok, Thailand",
  publisher = "Association for Computational Linguistics",
  url = "https://aclanthology.org/2024.acl-long.800",
  doi = "10.18653/v1/2024.acl-long.800",
  pages = "14973--15008"
}"""

st.subheader("The paper")
st.markdown(f"[**Why are Sensitive Functions Hard for Transformers?**]({PAPER}) by Michael Hahn and Mark Rofin, "
            "ACL 2024 (also [arXiv:2402.09963](https://arxiv.org/abs/2402.09963)). Cite it as:")
st.markdown(f"> {CITATION}")
with st.expander("BibTeX"):
    st.code(BIBTEX, language="bibtex")

st.markdown(
    "Hahn & Rofin (ACL 2024) prove that a transformer's loss landscape is constrained by the **input-space "
    "sensitivity** of the function it computes: fitting a sensitive function such as PARITY needs large "
    "parameters or large LayerNorm blowup, and such minima are sharp. This explorer computes each quantity "
    "of the theory for a real model."
)

st.subheader("Sensitivity and the Fourier spectrum")
st.latex(r"s(f,x) = \sum_{i=1}^n \mathbf{1}\{f(x^{\oplus i}) \neq f(x)\}, \qquad "
         r"\mathrm{as}_n(f) = \mathbb{E}_{x\in\{\pm1\}^n}\, s(f,x)")
st.markdown("For a real-valued f (MEAN, a model's raw output) the influence form, equal to the count for ±1-valued f:")
st.latex(r"s(f,x) = \sum_{i=1}^n \left(\frac{f(x) - f(x^{\oplus i})}{2}\right)^2")
st.latex(r"f(x) = \sum_{P \subseteq [n]} \lambda_P \chi_P(x),\quad \chi_P(x) = \prod_{i\in P} x_i,\qquad "
         r"\mathrm{as}_n(f) = \sum_P \lambda_P^2 |P| = \sum_{k=0}^n k\, d_k")
st.markdown("PARITY has as_n = n with all weight on degree n; FIRST has as_n = 1; MEAN has 1/n; MAJORITY grows like √n.")

st.subheader("The transformer and its LayerNorm factors")
st.latex(r"y_i^{(0)} = e(x_i) + p_i,\quad a_{ij} = (K y_j)^\top Q y_i,\quad b_{i,h} = \sum_j \hat a_{ij} V y_j,\quad "
         r"Y_i^{(k)} = f^{\mathrm{MLP}}\big(y_i^{(k-1)} + \textstyle\sum_h b_{i,h}\big)")
st.latex(r"y_i^{(k)} = \mathrm{LayerNorm}(Y_i^{(k)}),\qquad "
         r"N_i^{(k)} = \frac{1}{\sqrt{\sigma^2(Y_i^{(k)}) + \varepsilon}},\qquad "
         r"T(x) = \nu_{\mathrm{out}}^\top y_n^{(L)}")
st.latex(r"\tau^{(k)}(x) = \max_w \big(1 + N_w^{(k)}(x)\big),\qquad \mathrm{Blowup}(x) = \prod_k \tau^{(k)}(x)")
st.markdown("The trade-off: a model of parameter constant C fitting f must have")
st.latex(r"C \cdot \mathbb{E}\big[\mathrm{Blowup}(x)^2\big] \;\ge\; \frac{\mathrm{as}_n(f)}{\sqrt{n \log n}} - \frac{H}{n}")

st.subheader("Sharpness")
st.latex(r"L_{\rho,n}(T) = \mathbb{E}_{x}\,\mathbb{E}_{\|\Delta\|_2=\rho}\big(T_{\theta+\Delta}(x) - T_\theta(x)\big)^2,"
         r"\qquad \lim_{\rho\to0}\liminf_{n\to\infty} L_{\rho,n}(T) \ge "
         r"\liminf_{n\to\infty}\frac{\mathrm{as}_n(T_\theta)}{2n} - L\exp(-\Omega(d))")
st.markdown("Δ is uniform on the sphere of radius ρ over all parameters except positional encodings. As ρ → 0, "
            "L_ρ/ρ² tends to E_x‖∇_θ T(x)‖²/P, which sensviz computes exactly from per-example gradients. "
            "That limit is the first-order part of the sharpness; the paper's quantity is L_ρ at a finite radius "
            "(by default ρ = 0.02·√P), which the Landscape page reports first, with the limit beside it as the "
            "*small-ρ limit*.")

st.markdown("**Sharpness measures side by side, and the maps each is invariant to.** The maps (`sensviz.symmetries`, "
            "all keep T exactly): per head W_Q → AᵀW_Q, W_K → A⁻¹W_K and W_V → BᵀW_V, W_O → W_O B⁻ᵀ; each ReLU unit "
            "rescaled; the last norm2 against the head; biases before a LayerNorm shifted. Each measure is a registry "
            "quantity (`sensviz inspect --quantities …`, sweeps, the monitor); the Landscape page applies a random "
            "change and shows all of them before and after; docs/symmetry.md measures them across the zoo.")
st.markdown(
    "| measure (quantity) | definition | source | invariant to |\n|---|---|---|---|\n"
    "| L_ρ (`sharpness`) | E_x E_‖Δ‖=ρ (T_θ+Δ(x) − T_θ(x))², Δ uniform on the sphere over the non-positional "
    "parameters | Hahn & Rofin (2024) | the bias shifts only (Dinh et al., 2017: the others move it) |\n"
    "| its small-ρ limit (`limit`) | lim L_ρ/ρ² = E_x‖∇_θT(x)‖²/P, exactly from per-example gradients | the first-order "
    "part of L_ρ | the bias shifts only |\n"
    "| loss-space proxy (`proxy`) | E_Δ[L(θ+Δ) − L(θ)], Δ ~ N(0, ε²) per coordinate, ε = 0.02 | the paper's "
    "experiments | the bias shifts only |\n"
    "| top Hessian eigenvalue (`hessian`) | the largest eigenvalue of ∇²_θ L(θ) (Lanczos on Hessian-vector products) "
    "| Keskar et al. (2017) | the bias shifts only |\n"
    "| adaptive sharpness (`adaptive`) | E_x E_‖u‖=ρ (T_θ+\\|θ\\|⊙u(x) − T_θ(x))² | ASAM, Kwon et al. (2021) | elementwise "
    "rescalings only: the ReLU units and the last norm2 against the head (not A, B or the bias shifts) |\n"
    "| symmetry-aware sharpness (`orbit`) | the least L_ρ over the orbit's minimum-norm point and seeded points of "
    "condition number ≤ κ from it, with the same directions | ours, after Dinh et al. (2017); Hide & Seek (2025) "
    "use a geodesic measure instead (not implemented) | every exact map |")

st.subheader("Glossary: what each chart shows")
st.caption("The same definitions the Lab gives where a chapter first uses a term (`sensviz.glossary`).")
st.markdown("| name | symbol | what it is | where |\n|---|---|---|---|\n" + "\n".join(
    f"| {t.name} | {t.symbol} | {t.definition} | {t.where} |"
    for t in glossary.TERMS))
st.markdown(
    """
Values of a Boolean model are read on the ±1 scale of its target encoding: an output y trained on {0,1}
targets is 2y − 1 and its decision is y > 0.5. **Exact** numbers enumerate all 2^n inputs; above the
explorer's exact limit, **estimates** come from seeded samples with standard errors, and are labelled so.
"""
)
