"""Windows: what a per-step window could buy over the best fixed γ, from engine.offline.analysis over
reference runs — fixed γ sweep, the oracle, adaptive policies, the cost model and the 1.4× table."""

import importlib
from pathlib import Path

import pandas as pd
import streamlit as st

from app import (analyses, autocorrelation, downloads, imported, reconcile, reconcile_sources, reconcile_tables,
                 result_files, runs, share, site_map, traces, whatif, window_plots)
from app import window_story as story

st.title(site_map.heading("windows"))
st.caption("Every policy replayed offline over reference runs (one target run + teacher-forced draft signals), "
           "so fixed γ, the per-step oracle and adaptive policies are compared on identical outputs.")

try:
    analysis = importlib.import_module("engine.offline.analysis")
    advise = importlib.import_module("engine.offline.advise")
    oracles = importlib.import_module("engine.offline.oracles")
except Exception as e:  # the analysis module is optional for the rest of the app
    st.warning(f"Window analysis is unavailable: `engine.offline.analysis` could not be imported "
               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). The other pages still work.")
    st.stop()

# The headline sits above everything, filled once the tables below it are computed (no border: with no
# references it stays empty and invisible).
head = st.container()
glance = st.container()
imported.windows_section(traces.all_traces())  # imported runs: what their accepted lengths alone support
refs_all, bad = traces.references()
for name, err in bad.items():
    st.error(f"Reference skipped: {err}")
if not refs_all:
    st.info("No reference runs found. Put a `speclab.reference` file in `traces/` (the tiny demo one comes from "
            "`python -m app.make_demo_traces`) or upload one on the Upload page.")
    st.stop()

c1, c2, c3 = st.columns([3, 2, 2])
# One pair by default (the Qwen pair when present): references of two pairs would blend their numbers.
headers = {k: r.header for k, (r, _) in refs_all.items()}
# The view lives in the URL (app.share): references, cost model, c, task and section.
notes = [share.adopt_list("refs", "win_refs", list(refs_all), "references", page="windows")]
if "win_refs" not in st.session_state:
    st.session_state["win_refs"] = story.default_references(headers)
chosen = c1.multiselect("Reference runs", list(refs_all), key="win_refs")
if not chosen:
    st.info("Pick at least one reference run.")
    st.stop()
if blend := story.blend_warning(headers, chosen):
    st.warning(blend)
refs = [refs_all[k][0] for k in chosen]
key = tuple(refs_all[k][1] for k in chosen)
timed = analysis.has_timings(refs)
demo = all(r.header.get("demo") for r in refs)  # tiny demo timings (draft ≈ target) make a poor default
n_imported = sum(1 for e in traces.all_traces().values() if analyses.is_imported(e.trace))
with_imported = n_imported > 0 and c1.checkbox(
    f"include {n_imported} imported run{'s' if n_imported > 1 else ''} in the in-run cost model", value=False,
    key="win_in_run_imported", help="off: the in-run costs come from this lab's own decode traces only, so an "
                                    "upload does not change this page's figures until you tick this")
# what real decoding of this pair paid, when traces exist (imported runs only when opted in above)
in_run, n_in_run = analyses.in_run_cost(refs, key, with_imported)
from app import cost_paths  # noqa: E402  (the pair's per-weights-path costs, if measured)

pair_names = (refs[0].header.get("target", {}) or {}), (refs[0].header.get("draft", {}) or {})
path_costs = cost_paths.path_timings(pair_names[0].get("name", ""), pair_names[1].get("name", ""))
path_models = cost_paths.cost_models(path_costs)
modes = ((["in-run"] if in_run is not None else []) + (["measured"] if timed else [])
         + [f"{w} weights path" for w in path_models] + ["flat ratio c"])
notes.append(share.adopt("cost", "win_mode", modes, "cost model", page="windows"))
traces.pick("win_mode", modes, modes[-1] if demo else modes[0])
mode = c2.radio("Cost model", modes, key="win_mode",
                help="in-run: per-step costs fitted from this pair's decode traces (what real runs paid); "
                     "measured: the timing block recorded in the reference; WEIGHTS path: c and the verify "
                     "curve measured on that weights path (python -m engine costs --weights dense,quantized); "
                     "flat: Leviathan's model, verify costs one target forward whatever the window")
c_default = analysis.CostModel().c
notes.append(share.adopt("c", "win_c", [round(x * 0.01, 2) for x in range(101)], "cost ratio",
                         lambda v: round(float(v), 2), page="windows"))
st.session_state.setdefault("win_c", float(c_default))
if mode == "flat ratio c":  # the only model that reads c; elsewhere a disabled slider would be grey noise
    c = c3.slider("draft ÷ target cost ratio c", 0.0, 1.0, step=0.01, key="win_c",
                  help="cost of drafting one token relative to one target forward")
else:
    c = float(st.session_state["win_c"])
    c3.caption(f"The draft's cost ratio c comes from the {mode} cost model; pick “flat ratio c” to set it by hand.")
cost = (in_run if mode == "in-run" else "measured" if mode == "measured"
        else path_models[mode.removesuffix(" weights path")] if mode.endswith(" weights path") else float(c))
if demo:
    st.caption(":violet-badge[tiny-model demo] the demo reference comes from random tiny models: the shapes are "
               "real, the numbers say nothing about trained pairs.")

wt = analyses.window_table(refs, key, cost)
tasks = list(dict.fromkeys(wt["task"]))
notes.append(share.adopt("task", "win_task", tasks, "task", page="windows"))
traces.pick("win_task", tasks, "all")
task = st.segmented_control("Task", tasks, key="win_task") or "all"
g = wt[wt["task"] == task]
fixed = g[g["kind"] == "fixed"].sort_values("gamma")
best = fixed.loc[fixed["speedup"].idxmax()]
oracle_a = float(g.loc[g["policy"] == "oracle:a", "speedup"].iloc[0])
oracle_b = float(g.loc[g["policy"] == "oracle:b", "speedup"].iloc[0])
adaptive = g[g["kind"] == "adaptive"].assign(gamma=lambda d: d["drafted"] / d["target_calls"])
pos = analyses.reference_positions(refs, key)
alpha = float((pos if task == "all" else pos[pos["task"] == task])["beta"].mean())
cm = analysis.cost_for(refs[0], cost)
theory = analysis.iid_theory(min(alpha, 1 - 1e-9), cm.c, [int(x) for x in fixed["gamma"]])

speedups, pid = reconcile_sources.rows(), reconcile.pair_id(story.pair_of(refs[0].header)[0])


def linked(text: str, *prefer: str) -> str:
    """The page's sentences with every speedup linked to its row on the Speedups page."""
    return reconcile.linkify(text, speedups, pid, prefer)


# One section per run (st.tabs would build every chart of every tab on each run: 4.5 s first loads here).
SECTIONS = ["Speedup vs window", "Cost model", "Tokens per verify call", "Oracle ÷ best fixed, per task", "PACER's ceiling",
            "What if: threshold × K"]
notes.append(share.adopt("section", "win_section", SECTIONS, "section", page="windows"))
traces.pick("win_section", SECTIONS, SECTIONS[0])
shown = st.segmented_control("Section", SECTIONS, key="win_section") or SECTIONS[0]
share.publish(refs=",".join(chosen), cost=mode, c=f"{c:g}", task=task, section=shown)
if note := share.note(notes):
    head.caption(f"⚠ {note}")
body = st.container()  # the chosen section sits here, above the glance below
if shown == SECTIONS[0]:
    with body:
        m = st.columns(5)
        m[0].metric("best fixed γ*", int(best["gamma"]))
        m[1].metric("speedup at γ*", f"{best['speedup']:.2f}×")
        m[2].metric("oracle (a) speedup", f"{oracle_a:.2f}×",
                    help=f"the {oracles.REPLAY_ORACLE}: window = accepted run A(j), nothing wasted (engine.offline.oracles)")
        m[3].metric("oracle ÷ best fixed", f"{oracle_a / best['speedup']:.2f}×",
                    help=f"oracle (b), window = run + 1: {oracle_b / best['speedup']:.2f}×")
        m[4].metric("α (per-token acceptance)", f"{alpha:.2f}")
        st.caption(linked(f"On the Speedups page, beside every other figure for this pair: best fixed "
                          f"{best['speedup']:.2f}× AR, oracle (a) {oracle_a:.2f}× AR.", "replay-best-fixed",
                          "replay-oracle-a"))
        st.plotly_chart(window_plots.speedup_vs_window(fixed, "gamma", "speedup", oracle=oracle_a, adaptive=adaptive,
                                                      theory=theory), theme=None, width="stretch", key="win_speedup")
        st.caption(f"Cost model: {wt['cost'].iloc[0]} · values {g['value'].iloc[0]} · adaptive markers sit at their mean "
                   f"drafted window · dotted: i.i.d. closed form at α = {alpha:.2f}, c = {cm.c:.3g}"
                   + (f" · {wt.attrs['note']}" if wt.attrs.get("note") else ""))

ot = analyses.oracle_ratio_table(refs, key, reconcile_sources.window_costs(cost, timed))
refs_id = reconcile_tables.refs_key(chosen)  # the tables' speedups link to their rows (this view's, when reconciled)

target, draft = story.pair_of(refs[0].header)
oh = ot[ot["cost"] == wt["cost"].iloc[0]]
# the ceiling replays the recorded draft signals: greedy references only
cc = analyses.confidence_ceiling(refs, key, cost) if all(r.greedy for r in refs) else None
adv = advise.from_window_table(wt, story.pair_label((target, draft)),
                               "measured" if mode != "flat ratio c" else f"flat c = {c:g}", ceiling=cc)
# Does acceptance persist step to step? Fixed-window traces of this pair only: an adaptive policy's own
# windows would feed its decisions back into the series.
fixed_traces = [e for e in traces.all_traces().values() if e.info["draft"] == draft and str(e.info["policy"]).startswith(
    "fixed:") and runs.model_name(e.info["target"]) == runs.model_name(target)]
persist = autocorrelation.sentence(autocorrelation.of_traces([e.steps for e in fixed_traces]),
                                   f"this pair's {len(fixed_traces)} fixed-window decode traces") if fixed_traces else ""
head.info(linked(f"**{story.pair_label((target, draft))}: which window?** {adv.line().rstrip('.')}. **Oracle gain.** "
                 f"{story.oracle_gain(oh)}" + (f" **Does acceptance persist?** {persist}" if persist else ""),
                 "advice-windows"), icon=":material/lightbulb:")
with glance.expander("At a glance: gap closed, PACER, replayed vs real, cost"):  # the papers' other questions
    gaps = story.gap_closed(oh)
    st.markdown(f"**Gap closed.** {story.gap_sentence(gaps)}",
                help="position = (S_policy − S_best fixed) ÷ (S_oracle(a) − S_best fixed), over all tasks")
    if gaps["position"].notna().any():
        st.plotly_chart(window_plots.gap_closed_bars(gaps), theme=None, width="stretch", key="win_gap")
    if cc is not None:
        st.markdown(linked(f"**Confidence ceiling.** {story.ceiling_sentence(cc)}", "replay-confidence-ceiling"),
                    help=f"the {oracles.CONFIDENCE_CEILING} (engine.offline.oracles): survival, Bayes and HF-threshold "
                         "rules over a grid, each bin's acceptance from these references, chosen on all tasks")
    sweep = result_files.pacer_sweep_for(draft)
    pacer = story.pacer_sentence(draft, result_files.pacer_models(), result_files.pacer_ceiling(sweep),
                                 result_files.pacer_ceiling_model(sweep))
    pb = story.find_bench(result_files.bench_results(), target, draft, need=story.bench_pacer_standing)
    wall = story.pacer_wall_clock_sentence(*pb) if pb else None
    st.markdown(linked(f"**PACER.** {pacer}" + (f" {wall}" if wall else "")))
    if uncal := story.pacer_calibration(draft, result_files.pacer_models()):
        st.caption(uncal)
    wall_gaps = story.bench_gap_closed(pb[1]) if pb else pd.DataFrame()
    if len(wall_gaps):
        st.plotly_chart(window_plots.gap_closed_bars(wall_gaps, title="Gap closed on the wall clock (bench, greedy)"),
                        theme=None, width="stretch", key="win_gap_wall")
        st.caption(f"Measured, not replayed: docs/results/{pb[0]}, all tasks, T = 0; the same scale as above "
                   "(0 = the bench's best fixed window, 1 = its real hindsight oracle).")
    found = story.find_bench(result_files.bench_results(), target, draft)
    real_r = story.bench_oracle_ratio(found[1]) if found else None
    bench_gammas = real_r["gammas"] if real_r else None
    # Both sides take their best fixed window from the γs the bench ran, so the ratios compare.
    replayed = story.replayed_oracle_ratio(wt, bench_gammas) or story.replayed_oracle_ratio(wt)
    if replayed:
        st.markdown(linked(f"**Replayed vs real.** {story.reconcile_sentence(replayed, real_r, bench_gammas)}"
                           + (f" {story.WHY_DIFFER}" if real_r else ""), "replay-oracle-a"),
                    help=(f"replayed: {', '.join(chosen)} at {wt['cost'].iloc[0]}"
                          + (f"; real: docs/results/{found[0]}, temperature 0, all tasks" if found else "")))
    st.markdown(f"**Cost.** {story.cost_sentence(cm.c, mode == 'measured', timed, demo, n_in_run if mode == 'in-run' else 0)}")

gammas = [int(x) for x in fixed["gamma"]]
curve = pd.DataFrame({"gamma": gammas, "verify v(γ)": [cm.v(x) for x in gammas],
                      "step γc + v(γ)": [cm.step(x) for x in gammas]})
if shown == SECTIONS[1]:
    with body:
        st.plotly_chart(window_plots.cost_curve(curve), theme=None, width="stretch", key="win_cost")
        if path_costs:
            st.plotly_chart(window_plots.verify_curves(cost_paths.curve_frame(path_costs)), theme=None, width="stretch",
                                  key="win_paths")
            st.caption("Measured per weights path by `python -m engine costs --weights dense,quantized` "
                             "(docs/results/costs-*.json); pick a path as the cost model above to replay this pair's windows "
                             "at its costs.")

if shown == SECTIONS[2]:
    with body:
        spec_entries = {k: e for k, e in traces.all_traces().items() if e.info["draft"]}
        picked = st.multiselect("Decode traces", list(spec_entries), default=story.default_traces(spec_entries, target, draft),
                                key="win_traces", help="measured accepted lengths, one series per trace; by default "
                                                       "the traces of this page's pair (a handful)")
        acc = (analysis.trace_accepted_frame([spec_entries[k].trace for k in picked])
               .assign(series=lambda d: d["source"].map(lambda p: p.rsplit("/", 1)[-1])) if picked else pd.DataFrame())
        if len(acc):
            acc = acc if task == "all" else acc[acc["task"] == task]
            a, b = st.columns(2)
            view = a.segmented_control("View", ["histogram", "ECDF"], default="histogram", key="win_hist")
            col = b.segmented_control("Count", ["emitted", "accepted"], default="emitted", key="win_count",
                                      help="emitted includes the bonus/correction token; accepted excludes it")
            if len(acc):
                st.plotly_chart(window_plots.accepted_distribution(acc, x=col or "emitted", color="series",
                                                            ecdf=view == "ECDF"), theme=None, width="stretch", key="win_dist")
                st.caption("From the loaded decode traces (measured, one row per verify call); fixed-γ counts are "
                           "censored at γ.")
        else:
            st.caption("No speculative decode traces loaded for the accepted-length distribution.")

if shown == SECTIONS[3]:
    with body:
        st.plotly_chart(window_plots.ratio_bars(ot, "task", "ratio_a", color="cost"), theme=None, width="stretch",
                        key="win_ratio")
        show = ["task", "cost", "alpha", "best_gamma", "s_best_fixed", "s_oracle_a", "s_oracle_b", "ratio_a", "ratio_b",
                "iid_ratio_a", "iid_ratio_b", "value"] + [k for k in ot.columns if k.startswith("pos:")]
        plain = ot[show].rename(columns=story.RATIO_HEADERS | {k: f"gap closed: {k[4:]}" for k in show if k.startswith("pos:")})
        human = plain
        config = {k: st.column_config.NumberColumn(format="%.3f") for k in human.columns
                  if k not in ("task", "cost model", "best fixed γ*", "values")}
        for col in ("s_best_fixed", "s_oracle_a", "s_oracle_b"):  # ×AR figures: each a link to its row
            name = story.RATIO_HEADERS[col]
            cells = reconcile_tables.links(speedups, pid, reconcile_tables.oracle_ids(refs_id, ot, col), ot[col])
            human, config[name] = reconcile_tables.column(human, name, cells, f"{name} over autoregressive, replayed",
                                                          "%.3f")
        downloads.table(human, "oracle-ratio", "win_ratio_table", column_config=config, csv=plain)
        st.caption("oracle ÷ best fixed = S_oracle ÷ S_best fixed (oracle (a): window = the accepted run; (b): run + 1); "
                   "i.i.d. = the same from the closed form at the task's α; gap closed: <policy> = (S_policy − S_fixed*) ÷ "
                   "(S_oracle(a) − S_fixed*): 0 is the best fixed γ, 1 the oracle.")
        with st.expander("Why fixed windows lose: spread of the accepted run A(j) and of the best per-step window"):
            st.plotly_chart(window_plots.accept_run_ecdf(pos), theme=None, width="stretch", key="win_arun")
            downloads.table(analyses.variability_table(refs, key, cost), "variability", "win_var_table")
        with st.expander(f"All simulated policies for task '{task}'"):
            cells = reconcile_tables.links(speedups, pid, reconcile_tables.policy_ids(refs_id, g), g["speedup"])
            sim, speed = reconcile_tables.column(g, "speedup", cells, "simulated tokens/s ÷ autoregressive, replayed",
                                                 "%.3f")
            downloads.table(sim, f"simulated-policies-{task}", "win_sim_table", column_config={"speedup": speed}, csv=g)

if shown == SECTIONS[4]:
    with body:
        st.markdown("**How close can a pre-verifier get to the oracle?**")
        sweep = result_files.pacer_sweep_for(story.pair_of(refs[0].header)[1])
        ceil = result_files.pacer_ceiling(sweep)
        if ceil.empty:
            st.caption("No PACER sweep with a ceiling found (`python -m engine pacer sweep … --out "
                       "docs/results/pacer-sweep-qmax.json`).")
        else:
            split = st.segmented_control("Held-out steps", list(dict.fromkeys(ceil["split"])), default="all",
                                         key="win_ceil_split") or "all"
            cs = ceil[ceil["split"] == split]
            st.plotly_chart(window_plots.ceiling_lines(cs), theme=None, width="stretch", key="win_ceiling")
            wide = (cs.pivot_table(index=["f", "t_draft_ms"], columns="rule", values="of_oracle", sort=False).reset_index()
                    .rename(columns={"f": "draft cost factor f", "t_draft_ms": "draft ms per token"}))
            downloads.table(wide, f"pacer-ceiling-{split}", "win_ceil_table",
                            column_config={k: st.column_config.NumberColumn(format="%.2f") for k in wide.columns
                                           if k != "draft cost factor f"})
            swept = result_files.pacer_models().get(result_files.pacer_ceiling_model(sweep) or "")
            st.caption(f"Offline replay of the recorded held-out steps of the "
                       f"{story.pair_label(swept) if swept else 'demo'} pair (docs/results/{Path(sweep).name}). "
                       "Table: share of the oracle's speedup. The perfect pre-verifier is PACER (b = 1, trim) with an M_B "
                       "that is never wrong: it still drafts the token it drops, which the oracle never does, so it only "
                       "reaches the oracle as the draft's cost f → 0. Its oracle is the accepted-length bound of these recorded "
                       "steps, not the replay oracle above (engine.offline.oracles says why they differ).")

if shown == SECTIONS[5]:
    with body:
        if not all(r.greedy for r in refs):
            st.caption("The grid replays the draft's recorded confidence: it needs greedy references.")
        else:
            cells = whatif.grid(whatif.compute(refs, key, cost))
            st.markdown(whatif.sentence(cells, float(best["speedup"]), int(best["gamma"])))
            st.plotly_chart(whatif.heatmap(cells, wt["cost"].iloc[0]), theme=None, width="stretch", key="win_whatif")
            st.caption(f"Each cell: `{whatif.SPEC}` replayed exactly over the references (greedy), priced by the "
                       "cost model above — by default what this pair's decode traces paid per verify, by window (the "
                       "measured verify curve), so a long K pays its real verify cost.")
