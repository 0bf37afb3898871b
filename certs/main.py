"""`dynmig certs init|rotate|inject|show`: the webhook certificate by hand or from a Helm hook.

Exit codes: 0 done (or nothing was due), 1 the cluster or a Secret said no (message says which),
2 a bad command line (message names the flag).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from certs.authority import (
    KeyType,
    Lifetimes,
    ServiceIdentity,
    certs_to_pem,
    is_expired,
    load_certs,
    needs_renewal,
    san_names,
    utcnow,
)
from certs.rotation import Policy

if TYPE_CHECKING:
    from cryptography import x509
    from kubernetes import client

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


class UsageError(ValueError):
    pass


def parse_duration(flag: str, text: str) -> dt.timedelta:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdy])", text.strip())
    if not match:
        raise UsageError(f"{flag}: {text!r} is not a duration; use a number and a unit, e.g. 90d, 2160h, 5y")
    value = float(match[1]) * _UNITS[match[2]]
    if value <= 0:
        raise UsageError(f"{flag}: must be longer than zero, got {text!r}")
    return dt.timedelta(seconds=value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynmig certs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{init,rotate,inject,show}")

    def cluster_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--namespace",
            default=os.environ.get("POD_NAMESPACE"),
            help="namespace of the Service and Secrets (default: $POD_NAMESPACE)",
        )
        p.add_argument(
            "--service", default="dynmig", help="Service name of the webhook/extender (default: dynmig)"
        )
        p.add_argument("--secret", help="serving Secret (kubernetes.io/tls) name (default: <service>-tls)")
        p.add_argument("--ca-secret", help="CA Secret name (default: <service>-ca)")
        p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
        p.add_argument("--context", help="kubeconfig context")
        p.add_argument("--in-cluster", action="store_true", help="use the pod's service account")

    def webhook_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--mutating-webhook", help="MutatingWebhookConfiguration to inject the CA bundle into")
        p.add_argument(
            "--validating-webhook", help="ValidatingWebhookConfiguration to inject the CA bundle into"
        )

    def cert_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--key-type",
            choices=[k.value for k in KeyType],
            default="ecdsa",
            help="ecdsa (P-256, default) or rsa (2048)",
        )
        p.add_argument("--validity", default="90d", help="serving certificate validity (default 90d)")
        p.add_argument("--ca-validity", default="5y", help="CA validity (default 5y)")
        p.add_argument(
            "--renew-fraction",
            type=float,
            default=2 / 3,
            help="renew when this fraction of the life has passed (default 0.667)",
        )
        p.add_argument(
            "--bundle-overlap",
            default="1h",
            help="how long a new CA is trusted before use, and an old one after (default 1h)",
        )
        p.add_argument(
            "--extra-host",
            action="append",
            default=[],
            help="extra DNS name or IP for the serving certificate (repeatable, or comma list)",
        )

    init = sub.add_parser("init", help="create the CA and serving certificate unless valid ones exist")
    rotate = sub.add_parser("rotate", help="renew what is due (or everything serving with --force)")
    inject = sub.add_parser("inject", help="write the CA bundle into the webhook configurations")
    for p in (init, rotate, inject):
        cluster_flags(p)
        webhook_flags(p)
    for p in (init, rotate):
        cert_flags(p)
    rotate.add_argument(
        "--force", action="store_true", help="issue a new serving certificate even if not due"
    )
    inject.add_argument("--ca-file", help="inject this PEM bundle instead of the one in the CA Secret")

    show = sub.add_parser("show", help="print subjects, SANs and expiry from a Secret or from files")
    cluster_flags(show)
    show.add_argument("--cert-file", help="PEM file to show instead of the Secret")
    show.add_argument("--ca-file", help="PEM CA bundle file to show with --cert-file")
    return parser


# ---- helpers --------------------------------------------------------------------------------


def _names(args: argparse.Namespace) -> tuple[str, str, str]:
    if not args.namespace:
        raise UsageError("--namespace: required (or set $POD_NAMESPACE)")
    return args.namespace, args.secret or f"{args.service}-tls", args.ca_secret or f"{args.service}-ca"


def _policy(args: argparse.Namespace) -> Policy:
    hosts = tuple(h.strip() for item in args.extra_host for h in item.split(",") if h.strip())
    if not 0 < args.renew_fraction < 1:
        raise UsageError(f"--renew-fraction: must be between 0 and 1, got {args.renew_fraction}")
    serving = parse_duration("--validity", args.validity)
    ca = parse_duration("--ca-validity", args.ca_validity)
    if serving >= ca:
        raise UsageError(
            f"--validity ({args.validity}) must be shorter than --ca-validity ({args.ca_validity})"
        )
    lifetimes = Lifetimes(
        serving=serving,
        ca=ca,
        renew_fraction=args.renew_fraction,
        bundle_overlap=parse_duration("--bundle-overlap", args.bundle_overlap),
    )
    return Policy(ServiceIdentity(args.service, args.namespace, hosts), lifetimes, KeyType(args.key_type))


def _apis(args: argparse.Namespace) -> tuple[client.CoreV1Api, client.AdmissionregistrationV1Api]:
    from kubernetes import client

    from kube.client import api_client

    api = api_client(args.kubeconfig, in_cluster=True if args.in_cluster else None, context=args.context)
    return client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)


def describe(cert: x509.Certificate, now: dt.datetime, fraction: float = 2 / 3) -> list[str]:
    days = (cert.not_valid_after_utc - now).total_seconds() / 86400
    status = (
        "EXPIRED"
        if is_expired(cert, now)
        else ("renewal due" if needs_renewal(cert, now, fraction) else "valid")
    )
    return [
        f"  subject:    {cert.subject.rfc4514_string()}",
        f"  issuer:     {cert.issuer.rfc4514_string()}",
        f"  SANs:       {', '.join(san_names(cert)) or '(none)'}",
        f"  not before: {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}",
        f"  not after:  {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}",
        f"  days left:  {days:.1f} ({status})",
    ]


# ---- commands -------------------------------------------------------------------------------


def cmd_init_or_rotate(args: argparse.Namespace, force: bool) -> int:
    from certs.renewer import rotate
    from certs.store import SecretStore

    namespace, secret, ca_secret = _names(args)
    policy = _policy(args)
    core, admission = _apis(args)
    store = SecretStore(core, namespace, secret, ca_secret)
    inject = bool(args.mutating_webhook or args.validating_webhook)
    changes = rotate(
        store,
        policy,
        utcnow(),
        force=force,
        admission_api=admission if inject else None,
        mutating=args.mutating_webhook,
        validating=args.validating_webhook,
        require_webhooks=args.command != "init",
    )
    if changes:
        for change in changes:
            print(f"{args.command}: {change}")
    else:
        print(f"{args.command}: certificates in {namespace}/{secret} are valid and not due; nothing changed")
    return EXIT_OK


def cmd_inject(args: argparse.Namespace) -> int:
    from certs.inject import inject_ca_bundle
    from certs.store import SecretStore

    if args.ca_file:
        bundle = Path(args.ca_file).read_bytes()
        try:
            load_certs(bundle)
        except ValueError as error:
            raise UsageError(f"--ca-file {args.ca_file}: {error}") from None
    else:
        namespace, secret, ca_secret = _names(args)
        core, _ = _apis(args)
        loaded = SecretStore(core, namespace, secret, ca_secret).load()
        if not loaded.state.bundle:
            print(
                f"inject: no CA bundle in Secret {namespace}/{ca_secret}; run `dynmig certs init` first",
                file=sys.stderr,
            )
            return EXIT_FAILED
        bundle = certs_to_pem(loaded.state.bundle)
    _, admission = _apis(args)
    for result in inject_ca_bundle(admission, bundle, args.mutating_webhook, args.validating_webhook):
        print(f"inject: {result.describe()}")
    return EXIT_OK


def _read_pem(flag: str, path: str) -> list[x509.Certificate]:
    try:
        return load_certs(Path(path).read_bytes())
    except ValueError as error:
        raise UsageError(f"{flag} {path}: {error}") from None


def cmd_show(args: argparse.Namespace) -> int:
    now = utcnow()
    if args.cert_file:
        sections = [("certificate " + args.cert_file, _read_pem("--cert-file", args.cert_file))]
        if args.ca_file:
            sections.append(("CA bundle " + args.ca_file, _read_pem("--ca-file", args.ca_file)))
    else:
        from certs.store import decode_data

        namespace, secret, _ = _names(args)
        core, _ = _apis(args)
        data = decode_data(core.read_namespaced_secret(secret, namespace))
        if "tls.crt" not in data:
            print(f"show: Secret {namespace}/{secret} has no tls.crt", file=sys.stderr)
            return EXIT_FAILED
        sections = [
            (f"serving certificate (Secret {namespace}/{secret}, tls.crt)", load_certs(data["tls.crt"]))
        ]
        if data.get("ca.crt"):
            sections.append((f"CA bundle (Secret {namespace}/{secret}, ca.crt)", load_certs(data["ca.crt"])))
    for title, certs in sections:
        print(f"{title}:")
        for index, cert in enumerate(certs):
            if len(certs) > 1:
                print(f" [{index}]")
            print("\n".join(describe(cert, now)))
    return EXIT_OK


def _one_line(error: Exception) -> str:
    status = getattr(error, "status", None)
    if status is None:
        return str(error)
    body = getattr(error, "body", "") or ""
    try:
        import json

        body = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        pass
    return f"API server answered {status} {getattr(error, 'reason', '')}: {body}".strip()


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = parser or build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed the message naming the flag
        return EXIT_OK if exit_.code == 0 else EXIT_USAGE
    try:
        if args.command in ("init", "rotate"):
            return cmd_init_or_rotate(args, force=args.command == "rotate" and args.force)
        if args.command == "inject":
            return cmd_inject(args)
        return cmd_show(args)
    except UsageError as error:
        print(f"dynmig certs {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as error:
        print(f"dynmig certs {args.command}: file not found: {error.filename}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as error:  # unparsable PEM in a file
        print(f"dynmig certs {args.command}: {error}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as error:  # noqa: BLE001 - API errors, refused Secrets: one line, not a traceback
        print(f"dynmig certs {args.command}: failed: {_one_line(error)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
