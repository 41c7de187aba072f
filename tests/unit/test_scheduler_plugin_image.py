"""The image of kube-scheduler with kubeherd's out-of-tree plugin: what it is built from."""

from __future__ import annotations

from pathlib import Path

from localcluster.images import (
    IMAGE_NAMES,
    SCHEDULER_PLUGIN_IMAGE,
    fingerprint_scheduler_plugin,
    scheduler_plugin_inputs,
)


def plugin_source(root: Path) -> tuple[Path, Path]:
    source, module = root / "schedplugin", root / "k8s" / "1.37"
    for path, text in {
        source / "go.mod": "module kubeherd.local/hack/schedplugin\n",
        source / "main.go": "package main\n",
        source / "nodelabel.go": "package main\n",
        source / "nodelabel_test.go": "package main\n",
        module / "go.mod": "module kubeherd.local/hack/k8s/1.37\n",
        module / "go.sum": "",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return source, module


def test_the_plugin_image_is_rebuilt_when_its_go_code_or_the_pinned_modules_change(
    tmp_path: Path,
) -> None:
    source, module = plugin_source(tmp_path)
    before = fingerprint_scheduler_plugin(source, module)

    (source / "nodelabel_test.go").write_text("package main\n// another test\n")
    assert fingerprint_scheduler_plugin(source, module) == before

    for changed in (source / "nodelabel.go", module / "go.sum"):
        original = changed.read_text()
        changed.write_text(original + "// changed\n")
        assert fingerprint_scheduler_plugin(source, module) != before, changed
        changed.write_text(original)
    assert fingerprint_scheduler_plugin(source, module) == before


def test_the_plugin_is_built_from_the_repositorys_source_and_the_newest_pin() -> None:
    inputs = scheduler_plugin_inputs()

    assert {"schedplugin/main.go", "schedplugin/nodelabel.go"} <= set(inputs)
    assert not [name for name in inputs if name.endswith("_test.go")]
    assert inputs["k8s/go.mod"].parent.name == max(
        (path.parent.name for path in inputs["k8s/go.mod"].parent.parent.glob("*/go.mod")),
        key=lambda minor: tuple(int(part) for part in minor.split(".")),
    )


def test_the_plugin_image_is_one_the_real_node_tests_get() -> None:
    assert "scheduler-plugin" in IMAGE_NAMES
    # Not an official image: kubeherd judges its configurations by running it.
    assert not SCHEDULER_PLUGIN_IMAGE.startswith("registry.k8s.io/")
