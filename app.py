"""sensviz explorer: `streamlit run app.py`. The router (`ui.router`): the one list of pages
(`ui.nav.PAGES`, each declared in its own file under `pages/`) in `st.navigation`, and the frame
drawn once around every page (`ui.frame`: the sidebar with the model and the training job, the URL
state, the title).

Every page is a thin script over the `sensviz` core: widgets -> `ui.cache` (cached core calls)
-> `sensviz.charts`; `ui.registry` holds the session state, `ui.url_state` the URL state.
"""

from ui import router

current = router.frame()
with router.routing():
    current.run()
