"""sensviz explorer: `streamlit run app.py`. The router: the one list of pages (`ui.nav.PAGES`) in
`st.navigation`, and the frame drawn once around every page (`ui.frame`: the sidebar with the
model and the training job, the URL state, the title).

Every page is a thin script over the `sensviz` core: widgets -> `ui.cache` (cached core calls)
-> `ui.charts`; `ui.registry` holds the session and URL state.
"""

import streamlit as st

from ui import cache, frame, nav

st.set_page_config(page_title="sensviz", page_icon=":material/explore:", layout="wide")
cache.warm_up()  # once per server
current, spec = nav.navigation()
frame.draw(spec)
current.run()
