"""`kubeherd render schedulerprofile`: what it prints, and what it refuses, without a cluster."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from kubeherd.cli import main
from kubeherd.scheduler.core.render import RenderError, render
from kubeherd.scheduler.core.static_pod import static_pod
from tests.helpers import REPO

EXAMPLES = REPO / "examples"


def rendered(path: Path, **options: str | bool | int) -> tuple[list[dict[str, object]], str]:
    out, warn = io.StringIO(), io.StringIO()
    render(
        path,
        static=bool(options.get("static", False)),
        kubeconfig=str(options.get("kubeconfig", "")),
        out=out,
        warn=warn,
        kubernetes_version=str(options.get("kubernetes_version", "")),
        port=int(options.get("port", 10260)),
        config_root=str(options.get("config_root", "/etc/kubernetes/kubeherd")),
    )
    return [doc for doc in yaml.safe_load_all(out.getvalue()) if doc], warn.getvalue()


def test_the_configuration_names_the_resources_own_lease() -> None:
    (configuration,), warnings = rendered(EXAMPLES / "schedulerprofile-two-profiles.yaml")

    assert configuration["kind"] == "KubeSchedulerConfiguration"
    lock = configuration["leaderElection"]["resourceName"]  # type: ignore[index]
    assert lock == "kubeherd-two-profiles"
    assert warnings == ""


STATIC: dict[str, str | bool | int] = {
    "static": True,
    "kubeconfig": "/etc/kubernetes/scheduler.conf",
    "kubernetes_version": "v1.34.4+k3s1",
}


def test_the_static_pod_reads_config_and_kubeconfig_from_the_host() -> None:
    (pod,), _warnings = rendered(EXAMPLES / "schedulerprofile-packing.yaml", **STATIC)

    spec = pod["spec"]
    assert isinstance(spec, dict)
    (container,) = spec["containers"]
    # The node's release, not kubeherd's: a static pod has no API server to ask.
    assert container["image"] == "registry.k8s.io/kube-scheduler:v1.34.4"
    assert "--config=/etc/kubernetes/kubeherd/packing/config.yaml" in container["command"]
    assert "--secure-port=10260" in container["command"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    # Both must exist: the kubelet waits for them instead of creating them empty.
    assert [v["hostPath"] for v in spec["volumes"]] == [
        {"path": "/etc/kubernetes/kubeherd/packing", "type": "Directory"},
        {"path": "/etc/kubernetes/scheduler.conf", "type": "File"},
    ]
    assert spec["hostNetwork"] is True


def test_the_static_pod_cannot_take_the_name_of_a_kubeadm_component(tmp_path: Path) -> None:
    # A kubelet runs one pod of a name: a second manifest of that name replaces the first.
    (pod,), _warnings = rendered(_named(tmp_path, {"name": "kube-scheduler"}), **STATIC)

    assert pod["metadata"]["name"] == "kubeherd-kube-scheduler"  # type: ignore[index]
    assert pod["metadata"]["labels"]["component"] == "kubeherd-kube-scheduler"  # type: ignore[index]


def test_the_static_pod_names_the_configuration_it_runs_by_its_hash(tmp_path: Path) -> None:
    # The kubelet restarts a static pod only when its manifest changes.
    from kubeherd.scheduler.core.config import configuration_hash

    packing = EXAMPLES / "schedulerprofile-packing.yaml"
    out = io.StringIO()
    render(packing, static=False, kubeconfig=str(STATIC["kubeconfig"]), out=out, warn=out)
    configuration = out.getvalue().removesuffix("---\n")

    (pod,), _warnings = rendered(packing, **STATIC)
    changed = tmp_path / "changed.yaml"
    changed.write_text(packing.read_text().replace("weight: 5", "weight: 6"))
    (other,), _warnings = rendered(changed, **STATIC)

    annotations = pod["metadata"]["annotations"]  # type: ignore[index]
    assert annotations == {"kubeherd.io/config-hash": configuration_hash(configuration)}
    assert other["metadata"]["annotations"] != annotations  # type: ignore[index]


def test_the_static_pods_configuration_folder_can_be_elsewhere() -> None:
    packing = EXAMPLES / "schedulerprofile-packing.yaml"

    (pod,), _warnings = rendered(packing, **STATIC, config_root="/srv/schedulers")

    (container,) = pod["spec"]["containers"]  # type: ignore[index]
    assert "--config=/srv/schedulers/packing/config.yaml" in container["command"]
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/srv/schedulers/packing"  # type: ignore[index]


def test_a_custom_image_accepts_seed_000s_plugin_with_a_warning() -> None:
    (configuration,), warnings = rendered(EXAMPLES / "schedulerprofile-three-profiles.yaml")

    assert (
        "MyCustomPlugin is not an in-tree plugin of any kube-scheduler kubeherd knows" in warnings
    )
    assert configuration["profiles"][1]["plugins"]["filter"]["enabled"] == [  # type: ignore[index]
        {"name": "MyCustomPlugin"}
    ]


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (
            {"profiles": [{"schedulerName": "default-scheduler"}]},
            "default-scheduler is the cluster",
        ),
        ({"profiles": [{"schedulerName": "a"}], "parallelism": 0}, "parallelism"),
        (
            {"profiles": [{"schedulerName": "a"}], "leaderElection": {"leaseDuration": "5s"}},
            "leaseDuration must be longer than renewDeadline",
        ),
        (
            {
                "profiles": [
                    {"schedulerName": "a", "plugins": {"bind": {"disabled": [{"name": "*"}]}}}
                ]
            },
            "at least one bind plugin",
        ),
    ],
)
def test_an_invalid_file_is_refused_with_the_operators_words(
    tmp_path: Path, spec: dict[str, object], complaint: str
) -> None:
    path = tmp_path / "sp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubeherd.io/v1alpha1",
                "kind": "SchedulerProfile",
                "metadata": {"name": "x"},
                "spec": spec,
            }
        )
    )

    with pytest.raises(RenderError, match=complaint):
        rendered(path)


def test_the_command_exits_non_zero_with_an_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("kind: ConfigMap\n")

    assert main(["render", "schedulerprofile", "-f", str(path)]) == 1
    assert capsys.readouterr().err == f"error: {path} holds no SchedulerProfile\n"


def test_a_static_scheduler_on_the_clusters_own_lease_is_refused(tmp_path: Path) -> None:
    # As a static pod it would log in as the node's system:kube-scheduler, which may take it.
    manifest = tmp_path / "own-lease.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubeherd.io/v1alpha1",
                "kind": "SchedulerProfile",
                "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
                "spec": {
                    "profiles": [{"schedulerName": "second"}],
                    "leaderElection": {"resourceName": "kube-scheduler"},
                },
            }
        )
    )

    with pytest.raises(RenderError, match="Lease kube-system/kube-scheduler belongs to"):
        rendered(manifest, **STATIC)


def test_a_static_pod_needs_the_nodes_kubeconfig_and_version() -> None:
    packing = EXAMPLES / "schedulerprofile-packing.yaml"

    # In-cluster configuration needs a service account token, which a static pod lacks.
    with pytest.raises(RenderError, match="give --kubeconfig"):
        rendered(packing, **{**STATIC, "kubeconfig": ""})
    with pytest.raises(RenderError, match="give --kubernetes-version"):
        rendered(packing, **{**STATIC, "kubernetes_version": ""})
    with pytest.raises(RenderError, match="names no release"):
        rendered(packing, **{**STATIC, "kubernetes_version": "latest"})


def test_static_schedulers_of_one_file_get_ports_of_their_own(tmp_path: Path) -> None:
    path = _named(tmp_path, {"name": "second", "namespace": "kube-system"}, second="first")

    pods, _warnings = rendered(path, **STATIC, port=10270)

    ports = [pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] for pod in pods]  # type: ignore[index]
    assert ports == [10270, 10271]


def test_a_static_scheduler_in_kube_system_needs_no_more_rights_than_the_nodes(
    tmp_path: Path,
) -> None:
    # kube-system's system::leader-locking-kube-scheduler Role covers every Lease there.
    _pods, warnings = rendered(EXAMPLES / "schedulerprofile-packing.yaml", **STATIC)

    assert warnings == ""


def test_a_static_schedulers_lease_elsewhere_comes_with_the_rights_it_needs(
    tmp_path: Path,
) -> None:
    _pods, warnings = rendered(_named(tmp_path, {"name": "packing", "namespace": "team"}), **STATIC)

    assert "the Lease team/kubeherd-packing is outside kube-system" in warnings
    assert (
        "kubectl -n team create role kubeherd-packing-lease --verb=get,update "
        "--resource=leases.coordination.k8s.io --resource-name=kubeherd-packing\n"
        "  kubectl -n team create rolebinding kubeherd-packing-lease "
        "--role=kubeherd-packing-lease --user=system:kube-scheduler"
    ) in warnings


def test_a_static_scheduler_without_leader_election_needs_no_lease(tmp_path: Path) -> None:
    path = _file(
        tmp_path, {"profiles": [{"schedulerName": "a"}], "leaderElection": {"leaderElect": False}}
    )

    _pods, warnings = rendered(path, **STATIC)

    assert warnings == ""


def test_two_static_schedulers_on_a_node_can_have_ports_of_their_own() -> None:
    (pod,), _warnings = rendered(EXAMPLES / "schedulerprofile-packing.yaml", **STATIC, port=10261)

    (container,) = pod["spec"]["containers"]  # type: ignore[index]
    assert "--secure-port=10261" in container["command"]
    assert container["livenessProbe"]["httpGet"]["port"] == 10261


def _file(tmp_path: Path, spec: dict[str, object]) -> Path:
    path = tmp_path / "sp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubeherd.io/v1alpha1",
                "kind": "SchedulerProfile",
                "metadata": {"name": "x"},
                "spec": spec,
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (
            {"profiles": [{"schedulerName": "a"}], "leaderElection": {"resourceLock": "endpoints"}},
            "resourceLock must be leases",
        ),
        (
            {"profiles": [{"schedulerName": "a"}], "leaderElection": {"lock": "leases"}},
            r"spec.leaderElection.lock: unknown field",
        ),
        (
            {"profiles": [{"schedulerName": "a", "pluginconfig": []}]},
            "unknown field 'pluginconfig'",
        ),
        ({"profiles": [{"schedulerName": "a"}], "extenders": []}, "unknown field 'extenders'"),
        ({"profiles": [{"schedulerName": "a"}], "parallelism": "5"}, "'5' is not of type integer"),
        (
            {"profiles": [{"schedulerName": "a"}], "parallelism": True},
            "True is not of type integer",
        ),
        ({"profiles": [{"schedulerName": "a"}], "parallelism": 5.5}, "5.5 is not of type integer"),
        (
            {
                "profiles": [
                    {
                        "schedulerName": "a",
                        "plugins": {
                            "score": {"enabled": [{"name": "ImageLocality", "weight": "5"}]}
                        },
                    }
                ]
            },
            "weight: '5' is not of type integer",
        ),
        (
            {
                "profiles": [
                    {
                        "schedulerName": "a",
                        "pluginConfig": [
                            {"name": "InterPodAffinity"},
                            {"name": "InterPodAffinity"},
                        ],
                    }
                ]
            },
            "InterPodAffinity has a second pluginConfig entry",
        ),
    ],
)
def test_render_refuses_what_kubectl_apply_refuses_instead_of_coercing_or_dropping_it(
    tmp_path: Path, spec: dict[str, object], complaint: str
) -> None:
    with pytest.raises(RenderError, match=complaint):
        rendered(_file(tmp_path, spec))


def test_render_writes_the_v1_37_extension_points_and_the_args_as_written(tmp_path: Path) -> None:
    # With no --kubernetes-version, the checks are the newest minor's: 1.37 or later.
    profile = {
        "schedulerName": "a",
        "plugins": {"podGroupPostFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
        "pluginConfig": [
            {"name": "TaintToleration", "args": {"anything": [1, "y"]}},
            {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 5.0}},
        ],
    }

    (configuration,), _warnings = rendered(_file(tmp_path, {"profiles": [profile]}))

    assert configuration["profiles"] == [profile]


def test_strings_go_yaml_would_read_as_bools_or_numbers_are_quoted(tmp_path: Path) -> None:
    from kubeherd.scheduler.core.config import configuration_yaml

    text = configuration_yaml({"a": "y", "b": "1e3", "c": "on", "d": "10s", "e": "zone"})

    assert text == 'a: "y"\nb: "1e3"\nc: "on"\nd: 10s\ne: zone\n'


def _named(tmp_path: Path, metadata: dict[str, str], second: str = "") -> Path:
    """A profile with this metadata, after a valid one named `second` when given."""
    documents = [
        {
            "apiVersion": "kubeherd.io/v1alpha1",
            "kind": "SchedulerProfile",
            "metadata": each,
            "spec": {"profiles": [{"schedulerName": "a"}]},
        }
        for each in ([{"name": second}] if second else []) + [metadata]
    ]
    path = tmp_path / "sp.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


@pytest.mark.parametrize(
    "name", ["../../pki", "a/b", "Packing", "-packing", "x" * 254, "a..b", "packing\n"]
)
def test_a_name_that_is_not_a_dns_subdomain_is_refused_before_anything_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = _named(tmp_path, {"name": name}, second="first")

    code = main(
        [
            "render",
            "sp",
            "-f",
            str(path),
            "--static-pod",
            "--kubeconfig",
            "/k",
            "--kubernetes-version",
            "v1.34.4",
        ]
    )

    printed = capsys.readouterr()
    assert code == 1
    assert printed.out == ""
    assert printed.err == (
        f"error: metadata.name {name!r} is not a DNS-1123 subdomain: lower-case letters, "
        "digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
        "characters\n"
    )


@pytest.mark.parametrize("namespace", ["kube.system", "../etc", "Default", "n" * 64, "ns\n"])
def test_a_namespace_that_is_not_a_dns_label_is_refused(tmp_path: Path, namespace: str) -> None:
    path = _named(tmp_path, {"name": "packing", "namespace": namespace})

    with pytest.raises(RenderError, match=r"metadata.namespace .* is not a DNS-1123 label"):
        rendered(path, **STATIC)


def test_names_at_the_dns_limits_are_rendered(tmp_path: Path) -> None:
    name = ".".join(["a" * 63] * 4)[:253]
    path = _named(tmp_path, {"name": name, "namespace": "n" * 63})

    (configuration,), _warnings = rendered(path)

    assert configuration["leaderElection"]["resourceNamespace"] == "n" * 63  # type: ignore[index]


def test_a_static_pods_name_leaves_room_for_the_node_name(tmp_path: Path) -> None:
    # The kubelet's mirror pod is kubeherd-<name>-<node name>, at most 253 characters.
    longest = "a" * 180
    (pod,), _warnings = rendered(_named(tmp_path, {"name": longest}), **STATIC)
    assert pod["metadata"]["name"] == f"kubeherd-{longest}"  # type: ignore[index]

    with pytest.raises(RenderError, match="a static Pod's at most 180"):
        rendered(_named(tmp_path, {"name": "a" * 181}), **STATIC)


def test_a_static_pod_is_never_built_for_a_name_that_could_leave_its_directory() -> None:
    with pytest.raises(ValueError, match="DNS-1123 subdomain"):
        static_pod({}, "../../pki")


@pytest.mark.parametrize(
    ("election", "rendered_lock"),
    [({"resourceLock": "leases"}, "leases"), ({}, "leases"), ({"resourceLock": ""}, "")],
)
def test_the_lease_lock_kube_scheduler_takes_may_be_written_out(
    tmp_path: Path, election: dict[str, object], rendered_lock: str
) -> None:
    spec: dict[str, object] = {"profiles": [{"schedulerName": "a"}], "leaderElection": election}

    (configuration,), _warnings = rendered(_file(tmp_path, spec))

    assert configuration["leaderElection"]["resourceLock"] == rendered_lock  # type: ignore[index]


@pytest.mark.parametrize(
    "election",
    [
        {"leaseDuration": "0s", "renewDeadline": "12s"},
        {"renewDeadline": "0s"},
        {"retryPeriod": "0"},
        {"leaderElect": False, "leaseDuration": "5s", "renewDeadline": "10s"},
        {"leaderElect": False, "retryPeriod": "-1s", "resourceLock": "endpoints"},
    ],
)
def test_lease_timings_kube_scheduler_accepts_are_rendered_as_written(
    tmp_path: Path, election: dict[str, object]
) -> None:
    spec: dict[str, object] = {"profiles": [{"schedulerName": "a"}], "leaderElection": election}

    (configuration,), _warnings = rendered(_file(tmp_path, spec))

    written = configuration["leaderElection"]
    assert isinstance(written, dict)
    assert {key: written[key] for key in election} == election


@pytest.mark.parametrize(
    ("election", "complaint"),
    [
        ({"leaseDuration": "0s", "renewDeadline": "20s"}, "leaseDuration must be longer"),
        ({"renewDeadline": "0s", "retryPeriod": "9s"}, "1.2 times retryPeriod"),
        ({"renewDeadline": "-1s"}, "renewDeadline must not be negative"),
    ],
)
def test_lease_timings_are_checked_with_kube_schedulers_defaults_for_a_zero(
    tmp_path: Path, election: dict[str, object], complaint: str
) -> None:
    spec: dict[str, object] = {"profiles": [{"schedulerName": "a"}], "leaderElection": election}

    with pytest.raises(RenderError, match=complaint):
        rendered(_file(tmp_path, spec))
