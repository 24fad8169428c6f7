"""speclab app: `streamlit run app/main.py`. The page registry and nothing else; each page is one
thin file in app/pages/, shared loading lives in app/traces.py (frames in app/frames.py) and every figure in
app/plots.py."""

import streamlit as st

from app import style

st.set_page_config(page_title="speclab", page_icon=":material/fast_forward:", layout="wide")
style.apply()  # contrast, focus ring, token cards (app/style.py)

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("pages/replay.py", title="Replay", icon=":material/play_circle:"),
    st.Page("pages/windows.py", title="Windows", icon=":material/query_stats:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/multidraft.py", title="Multi-draft", icon=":material/account_tree:"),
    st.Page("pages/speedups.py", title="Speedups", icon=":material/balance:"),
    st.Page("pages/live.py", title="Live", icon=":material/bolt:"),
    st.Page("pages/upload.py", title="Upload", icon=":material/upload_file:"),
    st.Page("pages/sweeps.py", title="Sweeps", icon=":material/grid_on:"),
    st.Page("pages/dpace.py", title="D-PACE", icon=":material/model_training:"),
    st.Page("pages/audit.py", title="Audit", icon=":material/verified:"),
]

st.navigation(PAGES).run()
