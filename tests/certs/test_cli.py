"""`dynmig certs` command line: output of `show`, and errors that name the flag."""

from __future__ import annotations

from certs.authority import certs_to_pem
from certs.main import main
from dynmig.cli import main as dynmig_main


def test_show_prints_subject_issuer_sans_and_days_left_from_files(tmp_path, ca, serving, capsys):
    crt, bundle = tmp_path / "tls.crt", tmp_path / "ca.crt"
    crt.write_bytes(serving.cert_pem())
    bundle.write_bytes(certs_to_pem([ca.cert]))
    assert main(["show", "--cert-file", str(crt), "--ca-file", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "subject:    CN=dynmig.dynmig-system.svc" in out
    assert "issuer:     CN=dynmig webhook CA" in out
    assert "dynmig.dynmig-system.svc.cluster.local" in out and "127.0.0.1" in out
    assert "(valid)" in out
    assert "days left:  90.0" in out or "days left:  89.9" in out
    assert f"not after:  {serving.cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}" in out


def test_the_dynmig_console_script_dispatches_to_certs(tmp_path, serving, capsys):
    crt = tmp_path / "tls.crt"
    crt.write_bytes(serving.cert_pem())
    assert dynmig_main(["certs", "show", "--cert-file", str(crt)]) == 0
    assert "SANs:" in capsys.readouterr().out


def test_a_bad_duration_is_a_usage_error_naming_the_flag(capsys):
    code = main(["init", "--namespace", "gpu", "--validity", "ninety days"])
    assert code == 2
    assert "--validity: 'ninety days' is not a duration" in capsys.readouterr().err


def test_validity_longer_than_the_ca_is_refused(capsys):
    code = main(["init", "--namespace", "gpu", "--validity", "6y"])
    assert code == 2
    assert "--validity (6y) must be shorter than --ca-validity (5y)" in capsys.readouterr().err


def test_a_missing_namespace_is_named(capsys, monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert main(["init"]) == 2
    assert "--namespace: required" in capsys.readouterr().err


def test_an_unknown_key_type_is_refused_by_the_parser(capsys):
    assert main(["init", "--namespace", "gpu", "--key-type", "dsa"]) == 2
    assert "--key-type" in capsys.readouterr().err


def test_show_of_a_file_that_is_not_pem_names_the_flag(tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.write_text("hello")
    assert main(["show", "--cert-file", str(junk)]) == 2
    assert "--cert-file" in capsys.readouterr().err
