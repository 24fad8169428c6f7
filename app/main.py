"""speclab app: `streamlit run app/main.py`. The navigation and nothing else; the pages are listed once in
app/site_map.py, each is one thin file in app/pages/, shared loading lives in app/traces.py (frames in
app/frames.py) and every figure in app/plots.py."""

import streamlit as st

from app import site_map, style

st.set_page_config(page_title="speclab", page_icon=":material/fast_forward:", layout="wide")
style.apply()  # contrast, focus ring, token cards (app/style.py)

st.navigation([st.Page(p.file, title=p.title, icon=p.icon, default=p.default) for p in site_map.PAGES]).run()
