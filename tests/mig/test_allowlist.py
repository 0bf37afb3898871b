"""Allowlist policy: HAMi's rules, dynmig's catalog checks, and matching GPUs by NVML name."""

import textwrap

import pytest

from mig import allowlist as al
from mig import catalog


def issues_of(yaml_text, tmp_path, level=al.HAMI):
    path = tmp_path / "policy.yaml"
    path.write_text(textwrap.dedent(yaml_text))
    return al.check_allowlist_file(path, level)


def at(issues, path):
    return [i for i in issues if i.path == path]


# the rest of the catalog, switched off on purpose, so a test's findings are about its own entries
REST_OFF = "        - {models: [NVIDIA], migOff: true}\n"  # after the closing line's 4 spaces


def errors(issues):
    return [i for i in issues if i.severity == al.ERROR]


@pytest.mark.parametrize("model", catalog.MODELS, ids=lambda m: m.key)
def test_the_default_policy_matches_every_catalog_gpu_with_profiles_it_really_has(model):
    entry = al.default_allowlist().entry_for(model.nvml_name)
    assert entry is not None, f"{model.nvml_name} matches no entry of policies/default.yaml"
    assert entry.profiles
    for name in entry.profiles:
        assert model.profile(name) is not None, f"{model.nvml_name} has no {name}"


@pytest.mark.parametrize("level", al.LEVELS)
def test_the_default_policy_and_the_4g_example_pass_the_check_without_findings(level):
    assert al.check_allowlist_file(al.DEFAULT_POLICY, level) == []
    assert al.check_allowlist_file(al.DEFAULT_POLICY.parent / "examples" / "with-4g.yaml", level) == []


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


def test_a_profile_the_matched_gpu_lacks_is_a_warning_naming_its_real_profiles(tmp_path):
    found = issues_of(
        """
        nvidia:
          migProfileAllowlist:
            - models: ["H100 80GB HBM3"]
              profiles: [1g.5gb, 2g.20gb]
    """
        + REST_OFF,
        tmp_path,
        al.CHECK,
    )
    assert errors(found) == []
    (warning,) = found
    assert warning.path == "nvidia.migProfileAllowlist[0].profiles"
    assert "1g.5gb" in warning.problem and "NVIDIA H100 80GB HBM3" in warning.problem
    assert "1g.10gb" in warning.hint


def test_a_model_string_no_real_gpu_reports_is_a_warning(tmp_path):
    found = issues_of(
        """
        nvidia:
          migProfileAllowlist:
            - models: ["H100-SXM5-80GB"]
              profiles: [1g.10gb]
    """
        + REST_OFF,
        tmp_path,
        al.STRICT,
    )
    assert [i.path for i in found] == ["nvidia.migProfileAllowlist[0].models[0]"]
    assert found[0].severity == al.WARNING
    assert "write 'H100 80GB HBM3'" in found[0].hint


def test_a_broader_model_string_that_shadows_a_later_entry_is_reported(tmp_path):
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
    assert any("NVIDIA H200" in i.problem and "'H20'" in i.problem for i in found), found


def test_bad_yaml_and_a_missing_file_are_reported_not_raised(tmp_path):
    assert "not valid YAML" in issues_of("nvidia: [\n", tmp_path)[0].problem
    assert "cannot read" in al.check_allowlist_file(tmp_path / "absent.yaml")[0].problem


def test_loading_a_policy_with_errors_raises_with_every_message(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("nvidia:\n  migProfileAllowlist:\n    - {models: [A30], profiles: [4g]}\n")
    with pytest.raises(al.PolicyError) as raised:
        al.load_device_config(path)
    assert f"{path}: nvidia.migProfileAllowlist[0].profiles[0]" in str(raised.value)


def test_resource_names_come_from_the_device_config(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("nvidia:\n  resourceCountName: example.com/gpu\n  migProfileAllowlist: []\n")
    config = al.load_device_config(path)
    assert config.resources.count == "example.com/gpu"
    assert config.resources.memory == "nvidia.com/gpumem"


HAMIS_OWN_DEVICE_CONFIG = """
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: 0
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  enableNumaTopology: false
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
  migProfileAllowlist:
    - models: ["A30"]
      profiles: ["1g.6gb", "2g.12gb", "4g.24gb"]
    - models: ["A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    - models: ["A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"]
      profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"]
    - models: ["H100-PCIE-80GB", "H100-SXM5-80GB"]
      profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    - models: ["H20", "H100 on GH200"]
      profiles: ["1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"]
    - models: ["B200"]
      profiles: ["1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"]
cambricon:
  resourceCountName: cambricon.com/vmlu
"""


def test_hamis_own_device_config_loads_as_hami_reads_it_with_the_catalog_findings_as_warnings(tmp_path):
    path = tmp_path / "hami.yaml"
    path.write_text(HAMIS_OWN_DEVICE_CONFIG)
    config = al.load_device_config(path)
    assert config.allowlist.profiles_for("NVIDIA A30") == ("1g.6gb", "2g.12gb", "4g.24gb")
    assert config.warnings and all(w.severity == al.WARNING for w in config.warnings)
    assert not any("unknown key" in w.problem for w in config.warnings)
    problems = " ".join(i.problem for i in errors(al.check_allowlist_file(path, al.CHECK)))
    assert "no entry matches" in problems and "'7g.79gb' is not a MIG profile of any GPU" in problems


def test_a_near_miss_of_a_key_dynmig_reads_is_an_error_even_as_hami_reads_the_file(tmp_path):
    found = issues_of("Nvidia:\n  migProfileAllowlist: []\n", tmp_path)
    assert next((i.path, i.hint) for i in errors(found)) == (
        "Nvidia",
        "did you mean 'nvidia'? keys are case-sensitive",
    )
    found = issues_of("nvidia:\n  resourceCountNmae: x\n  migProfileAllowlist: []\n", tmp_path)
    assert at(errors(found), "nvidia.resourceCountNmae")[0].hint == "did you mean 'resourceCountName'?"


def test_an_unknown_nvidia_key_hami_does_not_define_is_a_warning(tmp_path):
    found = issues_of("nvidia:\n  shinyNewThing: 1\n  migProfileAllowlist: []\n", tmp_path)
    (warning,) = at(found, "nvidia.shinyNewThing")
    assert warning.severity == al.WARNING and "neither HAMi nor dynmig reads it" in warning.problem


def test_a_mig_off_entry_shadows_later_entries_like_any_first_match(tmp_path):
    allow, _issues = al.parse_allowlist(
        [{"models": ["H100 NVL"], "migOff": True}, {"models": ["H100"], "profiles": ["1g.10gb"]}]
    )
    assert allow.profiles_for("NVIDIA H100 NVL") == () and allow.entry_for("NVIDIA H100 NVL").mig_off
    assert allow.profiles_for("NVIDIA H100 PCIe") == ("1g.10gb",)
