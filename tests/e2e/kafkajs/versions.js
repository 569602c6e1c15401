// kafkajs 2.2.4 at a broker: one idempotent-free produce (acks -1), then print the request versions kafkajs sent
// (from its DEBUG log "Request Produce(key: 0, version: 7)") and the record's offset as JSON.
// Used by tests/e2e/test_wire_versions.py: node versions.js <brokers> <topic> <value>
const { Kafka, logLevel } = require('kafkajs')

const [, , brokers, topic, value] = process.argv
const sent = []
const logCreator = () => ({ log }) => {
  const m = /^Request \w+\(key: (\d+), version: (\d+)\)/.exec(log.message || '')
  if (m) sent.push([Number(m[1]), Number(m[2])])
}

async function main () {
  const kafka = new Kafka({ clientId: 'rafka-versions', brokers: brokers.split(','), logLevel: logLevel.DEBUG, logCreator })
  const producer = kafka.producer()
  await producer.connect()
  const [r] = await producer.send({ topic, acks: -1, messages: [{ partition: 0, value }] })
  await producer.disconnect()
  console.log(JSON.stringify({ error: r.errorCode, offset: Number(r.baseOffset), sent }))
}

main().catch(e => { console.error(e); process.exit(1) })
