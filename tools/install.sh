#!/usr/bin/env bash
# install.sh installs what `make test` needs beyond Go's module cache, and
# only what is missing, so that a fresh Debian machine (as root, or with
# sudo) needs nothing done by hand:
#
#   kcat                           a foreign Kafka client of the interop tests
#   python3-venv + tools/python/venv  (pip, pinned by tools/python/requirements.txt)
#                                  the Python SDK's tests and the Python examples
#   prometheus (with promtool)     the real server the dashboard tests query
#   helm                           renders and lints deploy/helm (bin/tools)
#   kube-score                     checks the rendered chart (bin/tools)
#   nodejs, npm + sdk/typescript/node_modules and dist/ (npm ci, pinned by
#                                  its package-lock.json, builds @canopy/agents)
#                                  and examples/typescript/node_modules (npm ci:
#                                  typescript, and a link to sdk/typescript)
#                                  test the TypeScript package and examples
#   tools/node/node_modules        (npm ci, pinned by its package-lock.json) the
#                                  AsyncAPI parser and Redocly CLI, which check
#                                  schema/asyncapi.yaml and schema/openapi.yaml
#   a JDK and Maven + tools/kafka/lib  Apache Kafka's broker, the version pinned
#                                  in tools/kafka/pom.xml, resolved from Maven
#                                  Central: the broker-matrix tests run it
#                                  (internal/apachekafka)
#
# Versions that resolve and work here are recorded in ../shared/INFRA-NOTES.md.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=${HELM_VERSION:-v3.19.0}
KUBE_SCORE_VERSION=${KUBE_SCORE_VERSION:-v1.20.0}
TOOLS_BIN=${TOOLS_BIN:-$PWD/bin/tools}

apt_pkgs=()
command -v kcat >/dev/null 2>&1 || apt_pkgs+=(kcat)
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || apt_pkgs+=(prometheus)
# The venv below is made with Debian's python3, which needs python3-venv for pip.
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || apt_pkgs+=(python3-venv)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_pkgs+=(nodejs npm)
command -v java >/dev/null 2>&1 || apt_pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || apt_pkgs+=(maven)
command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium) # the live view's browser test (internal/gateway)
command -v firefox-esr >/dev/null 2>&1 || apt_pkgs+=(firefox-esr) # the live view's Firefox test (internal/gateway)

if ((${#apt_pkgs[@]})); then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "tools: installing ${apt_pkgs[*]} from Debian"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
	# The package starts its own Prometheus (on :9090) where a service manager
	# runs; the tests start their own on a free loopback port instead.
fi

if ! [ -x "$TOOLS_BIN/helm" ] && ! command -v helm >/dev/null 2>&1; then
	echo "tools: building helm $HELM_VERSION from the Go module proxy"
	GOBIN="$TOOLS_BIN" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi

if ! [ -x "$TOOLS_BIN/kube-score" ] && ! command -v kube-score >/dev/null 2>&1; then
	echo "tools: building kube-score $KUBE_SCORE_VERSION from the Go module proxy"
	GOBIN="$TOOLS_BIN" go install "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION"
fi

# The TypeScript package, @canopy/agents: npm ci again whenever its
# package-lock.json changes (its checksum is the stamp); dist/ built again
# (npm run build) whenever its sources change, since examples/typescript
# runs it from there (the checksum of its sources is dist/'s stamp).
sdk_ts=sdk/typescript
sdk_stamp=$(sha256sum "$sdk_ts/package-lock.json" | cut -d' ' -f1)
if ! [ -x "$sdk_ts/node_modules/.bin/tsc" ] || [ "$(cat "$sdk_ts/node_modules/.stamp" 2>/dev/null)" != "$sdk_stamp" ]; then
	echo "tools: npm ci in $sdk_ts (kafkajs, kafkajs-snappy, typescript, as package-lock.json pins them; builds dist/)"
	(cd "$sdk_ts" && npm ci --no-audit --no-fund >/dev/null)
	echo "$sdk_stamp" >"$sdk_ts/node_modules/.stamp"
fi
sdk_src_stamp=$(cat "$sdk_ts/package.json" "$sdk_ts/tsconfig.json" "$sdk_ts"/src/*.ts | sha256sum | cut -d' ' -f1)
if [ "$(cat "$sdk_ts/dist/.stamp" 2>/dev/null)" != "$sdk_src_stamp" ]; then
	echo "tools: building $sdk_ts (tsc: dist/ and its .d.ts types)"
	(cd "$sdk_ts" && npm run --silent build >/dev/null)
	echo "$sdk_src_stamp" >"$sdk_ts/dist/.stamp"
fi

# Again whenever package-lock.json changes (a dependency added): its checksum is the stamp.
ts_stamp=$(sha256sum examples/typescript/package-lock.json | cut -d' ' -f1)
if ! [ -x examples/typescript/node_modules/.bin/tsc ] || [ "$(cat examples/typescript/node_modules/.stamp 2>/dev/null)" != "$ts_stamp" ]; then
	echo "tools: npm ci in examples/typescript (typescript, and @canopy/agents linked from sdk/typescript, as package-lock.json pins them)"
	(cd examples/typescript && npm ci --no-audit --no-fund >/dev/null)
	echo "$ts_stamp" >examples/typescript/node_modules/.stamp
fi

# The Python test environment: the SDK's dependency and pytest, as
# requirements.txt pins them, in a venv of Debian's python3 (PEP 668: no
# system-wide pip). The stamp is the requirements' checksum.
py_venv=tools/python/venv
py_stamp=$(sha256sum tools/python/requirements.txt | cut -d' ' -f1)
if ! [ -x "$py_venv/bin/python" ] || [ "$(cat "$py_venv/.stamp" 2>/dev/null)" != "$py_stamp" ]; then
	echo "tools: pip install into $py_venv (confluent-kafka, pytest, setuptools, as requirements.txt pins them)"
	rm -rf "$py_venv"
	/usr/bin/python3 -m venv "$py_venv"
	"$py_venv/bin/pip" install -q --disable-pip-version-check -r tools/python/requirements.txt
	echo "$py_stamp" >"$py_venv/.stamp"
fi

# The API documents' validators (schema/apitools_test.go). The stamp is the
# lock file's checksum, so a new pin installs again.
node_stamp=$(sha256sum tools/node/package-lock.json | cut -d' ' -f1)
if [ "$(cat tools/node/node_modules/.stamp 2>/dev/null)" != "$node_stamp" ]; then
	echo "tools: npm ci in tools/node (@asyncapi/parser, @redocly/cli, as package-lock.json pins them)"
	(cd tools/node && npm ci --no-audit --no-fund >/dev/null)
	echo "$node_stamp" >tools/node/node_modules/.stamp
fi

# Apache Kafka: the jars of the pinned version and what they need at run
# time, copied into tools/kafka/lib (ignored by git). The stamp is the pom's
# checksum, so a new pin resolves again and an unchanged one costs nothing.
kafka_lib=tools/kafka/lib
kafka_stamp=$(sha256sum tools/kafka/pom.xml | cut -d' ' -f1)
if [ "$(cat "$kafka_lib/.stamp" 2>/dev/null)" != "$kafka_stamp" ]; then
	echo "tools: resolving Apache Kafka ($(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' tools/kafka/pom.xml)) from Maven Central into $kafka_lib"
	rm -rf "$kafka_lib"
	# Maven's output only when it fails (quiet, it still prints colour resets).
	mvn_log=$(mktemp)
	if ! mvn -B -q -Dstyle.color=never -f tools/kafka/pom.xml dependency:copy-dependencies >"$mvn_log" 2>&1; then
		cat "$mvn_log"
		rm -f "$mvn_log"
		exit 1
	fi
	rm -f "$mvn_log"
	echo "$kafka_stamp" >"$kafka_lib/.stamp"
fi
