#!/bin/sh
# produce.sh: a small tree of agent events for one run, produced to canopy with kcat.
#
#   BROKERS=127.0.0.1:9092 RUN=run-sh-1 ./produce.sh
#   DRY_RUN=1 ./produce.sh          # print the events (one JSON per line) instead
#
# Each record: key = run id (kcat -K splits "key<TAB>value" lines), value = a CloudEvents 1.0
# JSON event (schema/events/), header content-type. kcat is librdkafka: its default partitioner
# (CRC32) puts a run in another partition than canopy and Java clients (murmur2), so this sets
# topic.partitioner=murmur2_random. (PARTITIONER=consistent_random shows what canopy does with
# a misconfigured producer: it reroutes the records, slower but never wrong.)
set -eu
BROKERS=${BROKERS:-127.0.0.1:9092}
TOPIC=${TOPIC:-canopy.agent-events.v1}
RUN=${RUN:-run-sh-$(date -u +%s)}
BASE=${BASE_TIME:-$(date -u +%Y-%m-%dT%H:%M:%S)} # whole seconds; events are BASE.000Z to BASE.900Z

n=0
ev() { # ev AGENT TYPE MILLIS DATA [CORRELATION]
	n=$((n + 1))
	corr=""
	[ -z "${5:-}" ] || corr=",\"correlationid\":\"$5\""
	printf '%s\t{"specversion":"1.0","id":"%s-%02d","source":"/agents/%s","type":"%s","time":"%s.%03dZ","runid":"%s","agentid":"%s","schemaversion":1,"sessionid":"session-1"%s,"data":%s}\n' \
		"$RUN" "$RUN" "$n" "$1" "$2" "$BASE" "$3" "$RUN" "$1" "$corr" "$4"
}

events() {
	ev conductor tree.node_created 0 '{"role":"conductor","capability":"orchestrate"}'
	ev conductor tree.node_status 100 '{"status":"running","reason":"planning"}'
	ev worker-1 tree.node_created 200 '{"role":"worker","parent_agent_id":"conductor","capability":"research"}' task-1
	ev worker-1 tree.node_delegated 300 '{"task_id":"task-1"}' task-1
	ev worker-2 tree.node_created 300 '{"role":"worker","parent_agent_id":"conductor","capability":"write"}' task-2
	ev worker-2 tree.node_delegated 400 '{"task_id":"task-2"}' task-2
	ev worker-1 signal.progress 500 '{"fraction":0.5}' task-1
	ev worker-2 signal.request 600 '{"request_id":"req-1","request_kind":"clarification","dedupe_key":"which-format"}' task-2
	ev worker-1 signal.result 700 '{"result_kind":"json","success":true}' task-1
	ev worker-1 tree.node_completed 800 '{"result_source":"completion_event"}' task-1
}

if [ -n "${DRY_RUN:-}" ]; then
	events | cut -f2-
	exit 0
fi
events | kcat -P -b "$BROKERS" -t "$TOPIC" -K "$(printf '\t')" \
	-H content-type=application/cloudevents+json \
	-X "topic.partitioner=${PARTITIONER:-murmur2_random}" -X enable.idempotence=true
echo "produced $n events of run $RUN to $TOPIC" >&2
