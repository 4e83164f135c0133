"""sensviz explorer: `streamlit run app.py`. The router (`ui.router`): the one list of pages
(`ui.nav.PAGES`, each declared in its own file under `pages/`) in `st.navigation`, and the frame
drawn once around every page (`ui.frame`: the sidebar with the model and the training job, the URL
state, the title).

Every page is a thin script over the `sensviz` core: widgets -> `ui.cache` (cached core calls)
-> `sensviz.charts`; `ui.registry` holds the session state, `ui.url_state` the URL state.

This file is read two ways. `streamlit run app.py` imports it as a module (`app`) and serves the
`st.App` below, whose start-up (`ui.serve.lifespan`) imports the app and draws every Lab chapter's
first view before the server answers; then each page view runs it as Streamlit's script
(`__main__`), which draws the page.
"""

import streamlit as st

if __name__ == "__main__":  # a page view
    from ui import router

    current = router.frame()
    with router.routing():
        current.run()
else:  # `streamlit run app.py`: the server
    from starlette.middleware import Middleware

    from ui import serve, upload_names

    app = st.App(__file__, lifespan=serve.lifespan, middleware=[Middleware(upload_names.LongUploadNames)])
