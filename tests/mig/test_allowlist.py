"""Allowlist policy: HAMi's rules, dynmig's catalog checks, and matching GPUs by NVML name."""

import textwrap

import pytest

from base import policyfiles as files
from mig import allowlist as al
from mig import catalog


def issues_of(yaml_text, tmp_path, strict=False):
    path = tmp_path / "policy.yaml"
    path.write_text(textwrap.dedent(yaml_text))
    return files.check_allowlist_file(path, strict)


def at(issues, path):
    return [i for i in issues if i.path == path]


# the rest of the catalog, switched off on purpose, so a test's findings are about its own entries
REST_OFF = "        - {models: [NVIDIA], migOff: true}\n"  # after the closing line's 4 spaces


def errors(issues):
    return [i for i in issues if i.severity == al.ERROR]


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_the_default_policy_matches_every_catalog_gpu_with_profiles_it_really_has(model):
    entry = files.default_allowlist().entry_for(model.nvml_name)
    assert entry is not None, f"{model.nvml_name} matches no entry of policies/default.yaml"
    assert entry.profiles
    for name in entry.profiles:
        assert model.profile(name) is not None, f"{model.nvml_name} has no {name}"


@pytest.mark.parametrize("strict", [False, True])
def test_the_default_policy_and_the_4g_example_pass_the_check_without_findings(strict):
    assert files.check_allowlist_file(files.DEFAULT_POLICY, strict) == []
    assert files.check_allowlist_file(files.DEFAULT_POLICY.parent / "examples" / "with-4g.yaml", strict) == []


def test_the_first_entry_whose_model_is_a_substring_of_the_nvml_name_wins():
    allow, _ = al.parse_allowlist(
        [
            {"models": ["H20"], "profiles": ["1g.12gb"]},
            {"models": ["H200"], "profiles": ["1g.18gb"]},
        ]
    )
    assert allow.profiles_for("NVIDIA H200") == ("1g.12gb",)
    assert allow.profiles_for("NVIDIA H20") == ("1g.12gb",)
    assert allow.entry_for("NVIDIA A30") is None


def test_hamis_valid_example_is_valid(tmp_path):
    assert (
        errors(
            issues_of(
                """
        nvidia:
          migProfileAllowlist:
            - models: [A100]
              profiles: [1g.5gb, 2g.10gb]
    """,
                tmp_path,
            )
        )
        == []
    )


@pytest.mark.parametrize(
    "entry,path,problem",
    [
        ("{models: [A100], profiles: []}", "nvidia.migProfileAllowlist[0].profiles", "non-empty list"),
        ("{models: [], profiles: [1g.5gb]}", "nvidia.migProfileAllowlist[0].models", "non-empty list"),
        ("{models: [A100], profiles: [7g]}", "nvidia.migProfileAllowlist[0].profiles[0]", "has no '.'"),
        ("{models: [A100], profiles: [g.5gb]}", "nvidia.migProfileAllowlist[0].profiles[0]", "slice key"),
        ("{models: [A100], profiles: [1x.5gb]}", "nvidia.migProfileAllowlist[0].profiles[0]", "slice key"),
        ("{models: [A100], profile: [1g.5gb]}", "nvidia.migProfileAllowlist[0].profile", "unknown key"),
        ("[A100]", "nvidia.migProfileAllowlist[0]", "must be a mapping"),
    ],
)
def test_a_broken_entry_is_an_error_that_names_the_field(entry, path, problem, tmp_path):
    found = errors(issues_of(f"nvidia:\n  migProfileAllowlist:\n    - {entry}\n", tmp_path))
    assert any(i.path == path and problem in i.problem for i in found), found


def test_another_models_profile_resolves_by_slice_key_with_a_warning_naming_the_real_profile(tmp_path):
    found = issues_of(
        """
        nvidia:
          migProfileAllowlist:
            - models: ["H100 80GB HBM3"]
              profiles: [1g.5gb, 2g.20gb]
    """,
        tmp_path,
    )
    assert errors(found) == []
    (warning,) = [i for i in found if i.severity == al.WARNING]
    assert warning.path == "nvidia.migProfileAllowlist[0].profiles"
    assert "'1g.5gb' is its 1g.10gb" in warning.problem and "NVIDIA H100 80GB HBM3" in warning.problem
    assert "1g.5gb -> 1g.10gb" in warning.hint


def test_a_model_string_no_real_gpu_reports_is_a_warning(tmp_path):
    found = issues_of(
        """
        nvidia:
          migProfileAllowlist:
            - models: ["H100-SXM5-80GB"]
              profiles: [1g.10gb]
            - models: ["A30"]
              profiles: [1g.6gb]
    """
        + REST_OFF,
        tmp_path,
    )
    assert [i.path for i in found] == ["nvidia.migProfileAllowlist[0].models[0]"]
    assert found[0].severity == al.WARNING
    assert "write 'H100 80GB HBM3'" in found[0].hint


def test_a_broader_model_string_that_shadows_a_later_entry_is_a_warning_saying_what_to_move(tmp_path):
    found = issues_of(
        """
        nvidia:
          migProfileAllowlist:
            - models: ["H20"]
              profiles: [1g.12gb]
            - models: ["H200"]
              profiles: [1g.18gb]
    """,
        tmp_path,
    )
    (shadow,) = at(found, "nvidia.migProfileAllowlist[1].models[0]")
    assert shadow.severity == al.WARNING and "entry [0] comes first" in shadow.problem
    assert shadow.hint.startswith("move this entry before entry [0]")
    assert errors(found) == []


def test_bad_yaml_and_a_missing_file_are_reported_not_raised(tmp_path):
    assert "not valid YAML" in issues_of("nvidia: [\n", tmp_path)[0].problem
    assert "cannot read" in files.check_allowlist_file(tmp_path / "absent.yaml")[0].problem


def test_loading_a_policy_with_errors_raises_with_every_message(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("nvidia:\n  migProfileAllowlist:\n    - {models: [A30], profiles: [4g]}\n")
    with pytest.raises(al.PolicyError) as raised:
        files.load_device_config(path)
    assert f"{path}: nvidia.migProfileAllowlist[0].profiles[0]" in str(raised.value)


def test_resource_names_come_from_the_device_config(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "nvidia:\n  resourceCountName: example.com/gpu\n  migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]\n"
    )
    config = files.load_device_config(path)
    assert config.resources.count == "example.com/gpu"
    assert config.resources.memory == "nvidia.com/gpumem"


def test_a_near_miss_of_a_key_dynmig_reads_is_an_error_even_as_hami_reads_the_file(tmp_path):
    found = issues_of("Nvidia:\n  migProfileAllowlist: []\n", tmp_path)
    assert next((i.path, i.hint) for i in errors(found)) == (
        "Nvidia",
        "did you mean 'nvidia'? keys are case-sensitive",
    )
    found = issues_of("nvidia:\n  resourceCountNmae: x\n  migProfileAllowlist: []\n", tmp_path)
    assert at(errors(found), "nvidia.resourceCountNmae")[0].hint == "did you mean 'resourceCountName'?"


def test_an_unknown_nvidia_key_hami_does_not_define_is_a_warning(tmp_path):
    found = issues_of(
        "nvidia:\n  shinyNewThing: 1\n  migProfileAllowlist: [{models: [A30], profiles: [1g.6gb]}]\n",
        tmp_path,
    )
    (warning,) = at(found, "nvidia.shinyNewThing")
    assert warning.severity == al.WARNING and "neither HAMi nor dynmig reads it" in warning.problem


def test_a_mig_off_entry_shadows_later_entries_like_any_first_match(tmp_path):
    allow, _issues = al.parse_allowlist(
        [{"models": ["H100 NVL"], "migOff": True}, {"models": ["H100"], "profiles": ["1g.10gb"]}]
    )
    assert allow.profiles_for("NVIDIA H100 NVL") == () and allow.entry_for("NVIDIA H100 NVL").mig_off
    assert allow.profiles_for("NVIDIA H100 PCIe") == ("1g.10gb",)


FIXTURES = files.DEFAULT_POLICY.parents[1] / "tests" / "fixtures"
HAMI_CHART_DEFAULT = FIXTURES / "hami-v2.10-chart-device-config.yaml"


def test_hamis_v2_10_chart_default_device_config_loads_with_warnings_each_naming_its_fix():
    found = files.check_allowlist_file(HAMI_CHART_DEFAULT)

    assert errors(found) == []
    warnings = [i for i in found if i.severity == al.WARNING]
    assert warnings and all(w.hint for w in warnings)
    assert not any(i.path.split(".")[0] != "nvidia" for i in found)  # other vendors' sections: untouched
    config = files.load_device_config(HAMI_CHART_DEFAULT)
    assert config.allowlist.profiles_for("NVIDIA A100-SXM4-80GB")[-1] == "7g.79gb"
    assert [r.label for r in al.published(config.allowlist, catalog.find_model("A100-SXM4-80GB"))] == [
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
        "7g.79gb",
    ]


@pytest.mark.parametrize("name", ["hami-docs-two-entry.yaml", "one-model.yaml"])
def test_a_policy_naming_only_the_models_a_cluster_has_passes_even_strict_with_the_rest_as_information(name):
    found = files.check_allowlist_file(FIXTURES / name, strict=True)

    assert [i.severity for i in found] == [al.INFO]
    assert "publish no MIG profile (as in HAMi)" in found[0].problem


FORMER_ERRORS = {
    "a name no driver reports, resolved by slice key": (
        '{models: ["A100-SXM4-80GB"], profiles: ["1g.10gb", "7g.79gb"]}',
        "'7g.79gb' is its 7g.80gb",
        "7g.79gb -> 7g.80gb",
    ),
    "a typo in a profile name": (
        '{models: ["A100-SXM4-40GB"], profiles: ["1g.5gb", "3g.20bg"]}',
        "'3g.20bg' is its 3g.20gb",
        "3g.20bg -> 3g.20gb",
    ),
    "another model's profile": (
        '{models: ["H100 80GB HBM3"], profiles: ["1g.10gb", "3g.20gb"]}',
        "'3g.20gb' is its 3g.40gb",
        "A100-PCIE-40GB, A100-SXM4-40GB have those names",
    ),
    "a broad string that takes a model none of whose names it reports": (
        '{models: ["H20"], profiles: ["1g.12gb"]}',
        "on H200 (NVIDIA H200, matched by 'H20'): '1g.12gb' is its 1g.18gb",
        "give H200 an entry of its own",
    ),
    "a slice key the matched GPU lacks": (
        '{models: ["RTX PRO 6000 Blackwell Server Edition"], profiles: ["1g.24gb", "3g.48gb"]}',
        "'3g.48gb' is omitted: RTX-PRO-6000 has no base 3g profile",
        "remove the name, or list one of RTX-PRO-6000's profiles",
    ),
}


@pytest.mark.parametrize("entry,problem,fix", FORMER_ERRORS.values(), ids=list(FORMER_ERRORS))
def test_each_former_error_is_now_a_warning_that_still_prints_its_fix_and_fails_under_strict(
    entry, problem, fix, tmp_path
):
    text = f"nvidia:\n  migProfileAllowlist:\n    - {entry}\n"

    found = issues_of(text, tmp_path)

    assert errors(found) == []
    (warning,) = [i for i in found if problem in i.problem]
    assert warning.severity == al.WARNING and fix in warning.hint
    assert any(problem in i.problem for i in errors(issues_of(text, tmp_path, strict=True)))


def test_catalog_models_the_policy_does_not_name_are_information_even_under_strict(tmp_path):
    found = issues_of(
        'nvidia:\n  migProfileAllowlist:\n    - {models: ["A30"], profiles: ["1g.6gb"]}\n', tmp_path, True
    )

    (info,) = found
    assert info.severity == al.INFO and "no entry names A100-SXM4-40GB" in info.problem.replace(
        "A100-PCIE", ""
    )


@pytest.mark.parametrize(
    "text,path,problem",
    [
        ("nvidia:\n  migProfileAllowlist: []\n", "nvidia.migProfileAllowlist", "is empty or missing"),
        (
            "nvidia:\n  migProfileAllowList:\n    - {models: [A30], profiles: [1g.6gb]}\n",
            "nvidia.migProfileAllowList",
            "unknown key",
        ),
        (
            "nvidia:\n  migProfileAllowlist:\n    - {models: [B300], profiles: [1g.34gb]}\n",
            "nvidia.migProfileAllowlist",
            "matches no GPU model",
        ),
        ("- just\n- a list of words\n", "migProfileAllowlist[0]", "must be a mapping"),
        ("42\n", "nvidia.migProfileAllowlist", "no allowlist found"),
    ],
)
def test_a_policy_that_cannot_mean_anything_is_still_an_error(text, path, problem, tmp_path):
    found = errors(issues_of(text, tmp_path))

    assert any(i.path == path and problem in i.problem for i in found), found


def test_entries_that_match_gpus_but_resolve_no_profile_there_are_an_error_saying_which_profiles_to_list(
    tmp_path,
):
    found = issues_of(
        "nvidia:\n  migProfileAllowlist:\n    - {models: [A30], profiles: [5g.1gb]}\n", tmp_path
    )

    (error,) = errors(found)
    assert (
        error.problem
        == "resolves no profile on the GPUs it matches: no known GPU would publish a MIG profile"
    )
    (warning,) = at(found, "nvidia.migProfileAllowlist[0].profiles")
    assert "A30 has 1g.6gb (5952 MiB)" in warning.hint
