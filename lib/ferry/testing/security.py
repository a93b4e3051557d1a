"""TLS and SASL for local test clusters: certificates made at test time, and the settings a
broker listener and a client need.

`sasl_ssl(folder)` and `mutual_tls(folder)` each make a fresh certificate authority in
`folder` (a temporary folder of the caller's), a broker certificate for 127.0.0.1/localhost
signed by it, and for mutual TLS a client certificate and key; `other_ca(folder)` makes a CA
nobody signed anything with (a client trusting it must refuse the broker), `stranger(folder)`
a client certificate no cluster trusts (a mutual-TLS broker must refuse it). Everything is made
with Debian's `openssl` command line, which Python's standard library cannot do, in well under
a second: EC P-256 keys, certificates valid for two days.

Files are named after the kind (`sasl-ca.pem`, `mtls-client.key`, ...; `prefix=` changes it):
spark-submit.sh ships each file under its base name, so two clusters' files must not share
one. A `Security` is what `ferry.testing.brokers.start_broker(security=...)` takes:

- `protocol`: the CLIENT listener's security protocol (`SASL_SSL` or `SSL`);
- `broker_settings("client")`: broker properties for that listener (PEM key store and trust
  store by location, `ssl.client.auth`, the SCRAM login module);
- `format_args`: extra `kafka-storage format` arguments — the SCRAM credential, written into
  the cluster's bootstrap metadata, so the user exists before the broker answers anyone
  (the INTERNAL and CONTROLLER listeners stay PLAINTEXT);
- `client_settings`: the librdkafka properties a client needs (`security.protocol`,
  `ssl.ca.location`, `sasl.*`, `ssl.certificate.location`/`ssl.key.location`).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SCRAM = "SCRAM-SHA-512"
DAYS = "2"  # a test run is over long before; a leftover folder's certificates soon expire


class SecurityError(RuntimeError):
    """Certificates could not be made (no `openssl`, or it failed)."""


@dataclass(frozen=True)
class Security:
    """One cluster's TLS/SASL setup: files in `folder`, the user when SASL is on."""

    kind: str  # "sasl_ssl" or "mtls"
    folder: Path
    ca: Path  # the CA certificate clients trust (PEM)
    broker_keystore: Path  # the broker's PKCS#8 key followed by its certificate (PEM)
    client_certificate: Path | None = None  # mutual TLS only
    client_key: Path | None = None
    username: str | None = None  # SASL only
    password: str | None = field(default=None, repr=False)

    @property
    def protocol(self) -> str:
        return "SASL_SSL" if self.kind == "sasl_ssl" else "SSL"

    def broker_settings(self, listener: str) -> dict[str, str]:
        """Broker properties for the listener `listener` (lower case, as Kafka prefixes
        per-listener settings): only that listener is secured."""
        prefix = f"listener.name.{listener.lower()}."
        settings = {
            # PEM files by location: Kafka reads the key and chain from one file, and trusts
            # the certificates of another (no JKS/PKCS#12 conversion, no store password).
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
        }
        if self.kind == "mtls":
            settings["ssl.client.auth"] = "required"
        else:
            settings["sasl.enabled.mechanisms"] = SCRAM
            settings[f"{SCRAM.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        return {prefix + k: v for k, v in settings.items()}

    @property
    def format_args(self) -> tuple[str, ...]:
        """`kafka-storage format` arguments: the SCRAM user, created with the cluster."""
        if self.kind != "sasl_ssl":
            return ()
        return ("--add-scram", f"{SCRAM}=[name={self.username},password={self.password}]")

    @property
    def client_settings(self) -> dict[str, str]:
        settings = {"security.protocol": self.protocol, "ssl.ca.location": str(self.ca)}
        if self.kind == "mtls":
            settings["ssl.certificate.location"] = str(self.client_certificate)
            settings["ssl.key.location"] = str(self.client_key)
        else:
            settings["sasl.mechanism"] = SCRAM
            settings["sasl.username"] = str(self.username)
            settings["sasl.password"] = str(self.password)
        return settings


def _openssl(*args: str | Path) -> None:
    if shutil.which("openssl") is None:
        raise SecurityError("the `openssl` command line is needed to make test certificates")
    done = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SecurityError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


def _key(path: Path) -> Path:
    # genpkey writes PKCS#8, the only unencrypted PEM key form Kafka's PEM key store reads.
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    return path


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    key = _key(folder / f"{name}.key")
    cert = folder / f"{name}.pem"
    _openssl(
        "req", "-x509", "-new", "-key", key, "-subj", f"/CN=ferry test {name}", "-days", DAYS,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", cert,
    )  # fmt: skip
    return cert, key


def _signed(folder: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    key = _key(folder / f"{name}.key")
    csr, cert, ext = folder / f"{name}.csr", folder / f"{name}.pem", folder / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", csr)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial",
        str(secrets.randbits(63)), "-days", DAYS, "-extfile", ext, "-out", cert,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return cert, key


def _broker(folder: Path, prefix: str, ca: tuple[Path, Path]) -> Path:
    """The broker's key store: key then certificate, one PEM file. librdkafka verifies the
    broker's name by default (ssl.endpoint.identification.algorithm=https), so the certificate
    names both ways a test reaches it."""
    cert, key = _signed(
        folder, f"{prefix}-broker", ca,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )  # fmt: skip
    keystore = folder / f"{prefix}-broker-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    return keystore


def _folder(folder: Path | str) -> Path:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def sasl_ssl(
    folder: Path | str, username: str = "ferry", password: str | None = None, prefix: str = "sasl"
) -> Security:
    """A SASL_SSL listener with SCRAM-SHA-512: a CA, the broker's certificate, and one user
    (a random password unless given; hex, so it needs no quoting in `--add-scram`)."""
    path = _folder(folder)
    ca = _ca(path, f"{prefix}-ca")
    return Security(
        "sasl_ssl",
        path,
        ca[0],
        _broker(path, prefix, ca),
        username=username,
        password=password or secrets.token_hex(16),
    )


def mutual_tls(folder: Path | str, prefix: str = "mtls") -> Security:
    """An SSL listener that requires a client certificate signed by its CA."""
    path = _folder(folder)
    ca = _ca(path, f"{prefix}-ca")
    cert, key = _signed(path, f"{prefix}-client", ca, "extendedKeyUsage=clientAuth\n")
    return Security("mtls", path, ca[0], _broker(path, prefix, ca), cert, key)


def other_ca(folder: Path | str) -> Path:
    """A CA certificate that signed nothing: a client trusting only it refuses every broker."""
    return _ca(_folder(folder), "other-ca")[0]


def stranger(folder: Path | str) -> tuple[Path, Path]:
    """A client certificate and key signed by a CA of their own: a broker requiring client
    certificates it trusts must refuse them."""
    path = _folder(folder)
    return _signed(path, "stranger", _ca(path, "stranger-ca"), "extendedKeyUsage=clientAuth\n")
