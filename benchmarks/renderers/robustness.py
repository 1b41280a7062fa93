"""Kill-and-resume and bad inputs (benchmarks/robustness/: robustness.json)."""

from __future__ import annotations

from .common import load


def robustness_table() -> list[str]:
    d = load("robustness.json")
    if not d:
        return []
    kr, bad = d["kill_resume"], d["bad_inputs_summary"]
    return [f"Robustness (`{d['command']}`): a scoring job ({kr['n_pairs']} pairs, {kr['n_shards']} shards) "
            f"SIGKILLed at {kr['kills_that_landed']} random moments and restarted each time ends "
            f"{'byte-identical to' if kr['identical_to_uninterrupted'] else 'DIFFERENT from'} an uninterrupted run, "
            f"with {len(kr['temp_files_after_final_run'])} temporary files left. {bad['cases']} bad inputs "
            f"(malformed JSON, wrong types, empty strings, invalid UTF-8, huge lines, missing files, mismatched "
            f"indexes) across every reader and endpoint: {bad['as_expected']} behave as expected "
            f"({bad['clean_error_exit_2']} clean errors naming file/line/field, the rest accepted on purpose), "
            f"{len(bad['cases_with_temp_files_left'])} leave temporary files, "
            f"{len(bad['failed_cases_with_outputs_written'])} leave a half-written output; each message is "
            "listed in `benchmarks/results/robustness.json`."]
