"""What the tests share, by layer: `core` (tiny specs and data for the library's tests), `server`
(waiting on jobs and processes), `app` (a Streamlit AppTest session), `browser` (the served app in
Chromium). A test file imports from here, never from another test file."""
