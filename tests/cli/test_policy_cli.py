"""`dynmig policy check | explain | diff`, through the console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynmig.policy import main
from mig.catalog import MODELS, find_model

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "policies" / "default.yaml")
WITH_4G = str(ROOT / "policies" / "examples" / "with-4g.yaml")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(body)
    return str(path)


def test_check_accepts_the_default_policy(capsys):
    code, out, _ = run(capsys, "check", DEFAULT)
    assert code == 0 and "ok" in out


def test_check_rejects_an_entry_without_profiles_naming_the_file_and_field(tmp_path, capsys):
    path = write(tmp_path, "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: []\n")
    code, _, err = run(capsys, "check", path)
    assert code != 0
    assert f"{path}: nvidia.migProfileAllowlist[0].profiles:" in err


REST_OFF = "    - {models: [NVIDIA], migOff: true}\n"


def test_check_prints_warnings_and_still_passes(tmp_path, capsys):
    path = write(
        tmp_path,
        "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [1g.6gb, 3g.40gb]\n"
        + REST_OFF,
    )
    code, out, _ = run(capsys, "check", path)
    assert code == 0
    assert f"{path}: nvidia.migProfileAllowlist[0].profiles" in out and "warning" in out


@pytest.mark.parametrize(
    ("model", "memory", "profile", "start"),
    [
        ("RTX PRO 6000", "8000", "1g.24gb", None),
        ("RTX-PRO-6000", "30000", "2g.48gb", 0),
        ("A100-SXM4-40GB", "5000", "2g.10gb", None),
        ("NVIDIA H100 80GB HBM3", "30000", "3g.40gb", None),
        ("A30", "20000", "4g.24gb", 0),
    ],
)
def test_explain_json_says_which_profile_and_placement_a_request_gets(capsys, model, memory, profile, start):
    code, out, _ = run(capsys, "explain", "--model", model, "--memory", memory, "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"fits", "profiles", "placements", "reason"}
    assert doc["fits"] is True and doc["profiles"] == [profile]
    (placement,) = doc["placements"]
    spec = find_model(model).profile(profile)
    assert (placement["start"], placement["size"]) in {(p.start, p.size) for p in spec.placements}
    if start is not None:
        assert placement["start"] == start
    assert profile in doc["reason"]


def test_explain_places_several_devices_around_the_occupied_slices(capsys):
    code, out, _ = run(
        capsys,
        "explain",
        "--model",
        "A100-SXM4-40GB",
        "--memory",
        "4000",
        "--gpus",
        "2",
        "--occupied",
        "0:4,6:1",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0 and doc["profiles"] == ["1g.5gb", "1g.5gb"]
    starts = {p["start"] for p in doc["placements"]}
    assert starts <= {4, 5} and len(starts) == 2


def test_explain_honours_a_preference_from_the_given_policy(capsys):
    code, out, _ = run(
        capsys,
        "explain",
        "--model",
        "A100-SXM4-40GB",
        "--memory",
        "15000",
        "--preference",
        "4g",
        "--policy",
        WITH_4G,
        "--json",
    )
    assert code == 0 and json.loads(out)["profiles"] == ["4g.20gb"]


def test_explain_json_for_a_request_that_does_not_fit_has_empty_lists_and_a_reason(capsys):
    code, out, _ = run(
        capsys,
        "explain",
        "--model",
        "A100-SXM4-40GB",
        "--memory",
        "9000",
        "--occupied",
        "0:1,3:1,4:1,6:1",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0
    assert doc == {"fits": False, "profiles": [], "placements": [], "reason": doc["reason"]}
    assert "fragmented: free slices 1,2,5,7" in doc["reason"]


def test_explain_in_text_names_the_profile_the_placement_and_why(capsys):
    code, out, _ = run(capsys, "explain", "--model", "RTX-PRO-6000", "--memory", "8000")
    assert code == 0
    assert "1g.24gb at" in out and "smallest allowlisted profile" in out


def test_an_unknown_model_lists_the_known_ones(capsys):
    code, _, err = run(capsys, "explain", "--model", "Tesla T4", "--memory", "1000")
    assert code == 2
    assert "--model" in err and all(m.key in err for m in MODELS)


@pytest.mark.parametrize(
    ("args", "flag", "fix"),
    [
        (["--memory", "lots"], "--memory", "--memory 8000"),
        (["--memory", "0"], "--memory", "positive"),
        (["--memory", "100", "--gpus", "0"], "--gpus", "--gpus 2"),
        (["--memory", "100", "--occupied", "3"], "--occupied", "START:SIZE"),
        (["--memory", "100", "--occupied", "0:2,1:1"], "--occupied", "overlap"),
        (["--memory", "100", "--occupied", "6:4"], "--occupied", "axis"),
        (["--memory", "100", "--gpus", "100000000"], "--gpus", "from 1 to 128"),
        (["--memory", "100", "--occupied", "0:1000000000"], "--occupied", "START:SIZE"),
        (["--memory", "1e400"], "--memory", "--memory 8000"),
    ],
)
def test_a_bad_argument_names_the_flag_and_the_fix(capsys, args, flag, fix):
    code, _, err = run(capsys, "explain", "--model", "A100-SXM4-40GB", *args)
    assert code == 2
    assert flag in err and fix in err


def test_diff_prints_only_what_changes_between_two_policies(tmp_path, capsys):
    narrower = write(
        tmp_path, "nvidia:\n  migProfileAllowlist:\n    - models: [A30]\n      profiles: [2g.12gb, 4g.24gb]\n"
    )
    code, out, _ = run(capsys, "diff", DEFAULT, narrower)
    assert code == 0
    lines = out.strip().splitlines()
    assert any(line.startswith("A30") and "1g.6gb -> 2g.12gb" in line for line in lines)
    assert any(line.startswith("A100-SXM4-40GB") and "-> (not allowlisted)" in line for line in lines)
    assert not any("-> 2g.12gb" in line and "2g.12gb ->" in line for line in lines)


def test_diff_of_a_policy_with_itself_has_no_changes(capsys):
    code, out, _ = run(capsys, "diff", DEFAULT, DEFAULT)
    summary, total = out.splitlines()
    assert code == 0 and summary == "summary: 0 model(s) change, 0 profile(s) added, 0 removed"
    assert total.startswith("0 change(s)")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("- " * 500 + "x", "nests deeper than 32 levels"),
        ("a: " + "[" * 2000, "not valid YAML"),
        ("a: &x [1, 2]\nb: [*x, *x, *x]", "uses an alias"),
        ("x: " + "y" * 300_000, "the limit is 262144"),
    ],
)
def test_check_refuses_a_hostile_file_with_a_message_not_a_traceback(tmp_path, capsys, body, why):
    code, _, err = run(capsys, "check", write(tmp_path, body))
    assert code != 0 and why in err


def test_check_refuses_a_file_that_is_not_text(tmp_path, capsys):
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"\xff\xfe\x00nvidia")
    code, _, err = run(capsys, "check", str(path))
    assert code != 0 and "cannot read" in err


def test_explain_reads_memory_as_a_kubernetes_quantity(capsys):
    _, as_k, _ = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--memory", "8k", "--json")
    _, plain, _ = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--memory", "8000", "--json")
    assert json.loads(as_k) == json.loads(plain)


# ---- issue 31: a check that catches mistakes ---------------------------------------------------
H100_ONLY = '    - models: ["H100 80GB HBM3"]\n      profiles: [{profiles}]\n'


def allowlist_file(tmp_path: Path, entries: str, key: str = "migProfileAllowlist") -> str:
    return write(tmp_path, f"nvidia:\n  {key}:\n{entries}")


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_a_miscased_allowlist_key_is_an_error_naming_the_key_it_meant(tmp_path, capsys, strict):
    path = allowlist_file(tmp_path, H100_ONLY.format(profiles="1g.10gb") + REST_OFF, "migProfileAllowList")
    code, _, err = run(capsys, "check", *strict, path)
    assert code == 1
    assert "nvidia.migProfileAllowList: unknown key 'migProfileAllowList'" in err
    assert "did you mean 'migProfileAllowlist'? keys are case-sensitive" in err


def test_an_empty_allowlist_is_an_error_that_shows_how_to_switch_mig_off_on_purpose(tmp_path, capsys):
    code, _, err = run(capsys, "check", write(tmp_path, "nvidia:\n  migProfileAllowlist: []\n"))
    assert code == 1 and "nvidia.migProfileAllowlist: is empty or missing" in err
    assert "{models: [NVIDIA], migOff: true}" in err and "dynmig policy default" in err


def test_models_the_policy_does_not_name_are_information_and_the_check_passes_even_strict(tmp_path, capsys):
    code, out, err = run(
        capsys, "check", "--strict", allowlist_file(tmp_path, H100_ONLY.format(profiles="1g.10gb"))
    )
    assert (code, err) == (0, "")
    assert "info: no entry names A30, A100-SXM4-40GB" in out and out.strip().endswith("ok (strict)")


def test_strict_fails_a_model_string_no_gpu_reports_whose_gpus_a_catch_all_then_switches_off(
    tmp_path, capsys
):
    path = allowlist_file(
        tmp_path, '    - models: ["H100-SXM5-80GB"]\n      profiles: [1g.10gb]\n' + REST_OFF
    )
    code, out, _ = run(capsys, "check", path)
    assert code == 0 and "warning: 'H100-SXM5-80GB' is not part of any known GPU's NVML name" in out
    code, _, err = run(capsys, "check", "--strict", path)
    assert code == 1 and "write 'H100 80GB HBM3'" in err
    assert "1 error(s) (--strict: warnings count as errors); the policy would be rejected" in err


def test_a_broad_model_string_that_gives_a_gpu_other_models_names_says_which_and_what_to_do(tmp_path, capsys):
    path = allowlist_file(tmp_path, '    - models: ["H100"]\n      profiles: [1g.10gb]\n' + REST_OFF)
    code, out, _ = run(capsys, "check", path)
    assert code == 0
    assert "on H100-NVL-94GB (NVIDIA H100 NVL, matched by 'H100'): '1g.10gb' is its 1g.12gb" in out
    assert "give H100-NVL-94GB an entry of its own" in out


def test_a_profile_name_no_gpu_has_is_a_warning_with_the_name_to_write(tmp_path, capsys):
    path = allowlist_file(tmp_path, H100_ONLY.format(profiles="1g.10gb, 3g.40bg") + REST_OFF)
    code, out, _ = run(capsys, "check", path)
    assert code == 0
    assert (
        "'3g.40bg' is its 3g.40gb" in out
        and "write the name H100-SXM5-80GB's driver reports: 3g.40bg -> 3g.40gb" in out
    )


def test_a_profile_of_another_model_is_a_warning_and_an_error_under_strict(tmp_path, capsys):
    path = allowlist_file(tmp_path, H100_ONLY.format(profiles="1g.10gb, 3g.20gb") + REST_OFF)
    code, out, _ = run(capsys, "check", path)
    assert code == 0 and "warning: on H100-SXM5-80GB" in out and "'3g.20gb' is its 3g.40gb" in out
    assert "A100-PCIE-40GB, A100-SXM4-40GB have those names" in out
    code, _, err = run(capsys, "check", "--strict", path)
    assert code == 1 and "'3g.20gb' is its 3g.40gb" in err and "warning: on" not in err


def test_an_unknown_entry_key_is_an_error_with_the_nearest_key(tmp_path, capsys):
    path = allowlist_file(tmp_path, '    - models: [A30]\n      Profiles: ["1g.6gb"]\n')
    code, _, err = run(capsys, "check", path)
    assert code == 1 and "[0].Profiles: unknown key 'Profiles' (did you mean 'profiles'?)" in err


def test_mig_off_with_profiles_or_not_a_boolean_is_an_error(tmp_path, capsys):
    path = allowlist_file(tmp_path, '    - {models: [A30], migOff: true, profiles: ["1g.6gb"]}\n')
    code, _, err = run(capsys, "check", path)
    assert code == 1 and "an entry with migOff: true lists no profiles" in err
    code, _, err = run(capsys, "check", allowlist_file(tmp_path, '    - {models: [NVIDIA], migOff: "yes"}\n'))
    assert code == 1 and "[0].migOff: must be true or false" in err


def test_diff_starts_with_a_summary_of_models_and_profiles_added_and_removed(tmp_path, capsys):
    only_a30 = allowlist_file(tmp_path, '    - {models: [A30], profiles: ["1g.6gb", "4g.24gb"]}\n' + REST_OFF)
    code, out, _ = run(capsys, "diff", DEFAULT, only_a30)
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "summary: 16 model(s) change, 0 profile(s) added, 58 removed"
    assert lines[1].startswith("  models left with no MIG profile: A100-SXM4-40GB, A100-PCIE-40GB")
    assert "  A30              -2g.12gb" in lines


def test_policy_default_prints_the_packaged_default_to_start_a_policy_from(capsys):
    code, out, _ = run(capsys, "default")
    assert code == 0 and out == Path(DEFAULT).read_text()


def test_explain_says_why_in_words_without_a_placeholder_gpu_id(capsys):
    code, out, _ = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--memory", "80000")
    assert code == 0 and "GPU-explain" not in out
    assert "why: no allowlisted profile has 80000 MiB; the largest is 7g.40gb" in out


def test_explain_on_a_model_the_policy_switches_off_says_so(tmp_path, capsys):
    path = allowlist_file(tmp_path, H100_ONLY.format(profiles="1g.10gb") + REST_OFF)
    _code, out, _ = run(capsys, "explain", "--model", "A30", "--memory", "4000", "--policy", path)
    assert (
        "why: the allowlist switches MIG off on A30 (NVIDIA A30) (matched by 'NVIDIA', migOff: true)" in out
    )


@pytest.mark.parametrize(("written", "mib"), [("8Gi", 8192), ("16G", 15259)])
def test_explain_memory_in_bytes_says_what_the_admission_webhook_says(capsys, written, mib):
    code, _, err = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--memory", written)
    assert code == 2
    assert (
        f'argument --memory: nvidia.com/gpumem counts MiB: {written} is {mib} (write nvidia.com/gpumem: "{mib}"'
        in err
    )


def test_explain_percentage_that_rounds_up_to_a_whole_gpu_says_so_and_what_to_ask(capsys):
    code, out, _ = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--percentage", "50")
    assert code == 0
    assert "request: 1 × 50% of GPU memory" in out and "device 0: 7g.40gb at 0:8" in out
    assert (
        "50 % of 40960 MiB is 20480 MiB, just above 3g.20gb's 20096 MiB, so it takes 7g.40gb, the whole GPU"
        in out
    )
    assert "--percentage 49 or --memory 20096 gets a 3g.20gb" in out
    code, out, _ = run(capsys, "explain", "--model", "A100-SXM4-40GB", "--percentage", "49", "--json")
    assert json.loads(out)["profiles"] == ["3g.20gb"]


@pytest.mark.parametrize("bad", ["0", "100", "half"])
def test_explain_percentage_outside_1_to_99_names_the_flag_and_the_range(capsys, bad):
    code, _, err = run(capsys, "explain", "--model", "A30", "--percentage", bad)
    assert code == 2 and "--percentage" in err and "from 1 to 99" in err


def test_explain_profiles_lists_each_models_profiles_with_their_mib(capsys):
    code, out, _ = run(capsys, "explain", "--profiles")
    assert code == 0
    assert (
        "| H100-SXM5-80GB | NVIDIA H100 80GB HBM3 | 1g.10gb: 9,984 · 2g.20gb: 20,096 · 3g.40gb: 40,448" in out
    )
    hami = str(ROOT / "tests" / "fixtures" / "hami-v2.10-chart-device-config.yaml")
    code, out, _ = run(capsys, "explain", "--profiles", "--model", "A100-SXM4-80GB", "--policy", hami)
    assert out.splitlines()[-1].endswith("· 7g.79gb (7g.80gb): 80,896 |")
    code, out, _ = run(capsys, "explain", "--profiles", "--model", "H100-NVL", "--policy", hami)
    assert "| H100-NVL-94GB | NVIDIA H100 NVL | none (publishes no MIG profile) |" in out
