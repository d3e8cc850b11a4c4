"""The version of canopy's contract this package follows.

SCHEMA_VERSION is the events' schemaversion; the package's version is "<SCHEMA_VERSION>.<minor>.<patch>"
(pyproject.toml says the same). CONTRACT_SHA256 is the SHA-256 of schema/events/*.json concatenated in
name order: sdk/sdk_test.go fails when the schemas change and it does not, so that a change to the
contract comes with regenerated builders (gen.py) and a new package version.
"""

SCHEMA_VERSION = 1
"""The schemaversion of every event this package builds."""

__version__ = "1.0.0"
"""The package's version; its major is SCHEMA_VERSION."""

CONTRACT_SHA256 = "e657a21e662c452b26b71129c9fb5d460bb67566e6e69327b4479ab736370705"
"""SHA-256 of schema/events/*.json, concatenated in name order, that this version was generated from."""
