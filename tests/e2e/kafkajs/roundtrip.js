// kafkajs against rafka's Kafka wire listener: run by tests/e2e/test_wire_kafkajs.py, which checks the JSON
// summary printed on the last line of stdout.
//
//   node roundtrip.js roundtrip <bootstrap> <topic> <group> <n>
//     admin createTopics (3 partitions, RF 3, min.insync.replicas 2), an idempotent producer sending n keyed
//     records with acks -1, a group consumer (autoCommit off) committing each record's offset + 1 until it
//     has n records, then admin fetchOffsets and describeGroups while the member is still in the group.
//   node roundtrip.js delete <bootstrap> <topic>
//     admin deleteTopics, then listTopics.
//   node roundtrip.js txn <bootstrap> <topic> <group> <n>
//     on an existing topic of 3 partitions: a transactional producer (InitProducerId, AddPartitionsToTxn,
//     AddOffsetsToTxn, TxnOffsetCommit and EndTxn at kafkajs's versions) commits n records with the group's
//     offset 5 for partition 0, aborts n more, commits n more; a second producer with the same transactional
//     id fences the first; a read_committed kafkajs consumer then reads the topic, and the admin reads the
//     group's offsets.
'use strict'

const { Kafka, Partitioners, logLevel } = require('kafkajs')
const printSummary = require('./summary')

const [mode, bootstrap, topic, group, nArg] = process.argv.slice(2)

function kafkaClient() {
  return new Kafka({
    clientId: 'rafka-e2e-kafkajs',
    brokers: bootstrap.split(','),
    logLevel: logLevel.WARN,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 2000 },
  })
}

function deadline(ms, what) {
  return new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms).unref())
}

// Runs ``consumer`` on the topic from the beginning until ``want`` messages came (60 s at most), each turned
// into what it records by ``record``, then waits 1 s more: anything beyond them (a duplicate, an aborted record)
// shows up in what it returns. The consumer stays connected.
async function consumeAtLeast(consumer, want, autoCommit, record) {
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const got = []
  let finished
  const done = new Promise((resolve) => (finished = resolve))
  await consumer.run({
    autoCommit,
    eachMessage: async (payload) => {
      got.push(await record(payload))
      if (got.length >= want) finished()
    },
  })
  await Promise.race([done, deadline(60000, `consuming ${want} records (got ${got.length})`)])
  await new Promise((r) => setTimeout(r, 1000))
  return got.slice()
}

async function roundtrip() {
  const n = Number(nArg)
  const kafka = kafkaClient()
  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({
    topics: [
      { topic, numPartitions: 3, replicationFactor: 3, configEntries: [{ name: 'min.insync.replicas', value: '2' }] },
    ],
    waitForLeaders: true,
    // kafkajs's default CreateTopics timeout is 5 s; 9 replica actors can take longer to start on a loaded
    // 2-core machine, and the broker then answers REQUEST_TIMED_OUT (as Kafka does), which kafkajs raises
    timeout: 30000,
  })
  const listed = await admin.listTopics()
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })

  const sent = []
  for (let i = 0; i < n; i++) sent.push({ key: `key-${i % 7}`, value: `kjs-${i}` })
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  const acks = []
  for (let i = 0; i < n; i += 25) {
    const res = await producer.send({ topic, acks: -1, messages: sent.slice(i, i + 25) })
    for (const r of res) acks.push({ partition: r.partition, errorCode: r.errorCode, baseOffset: r.baseOffset })
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 })
  const consumed = await consumeAtLeast(consumer, n, false, async ({ partition, message }) => {
    await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }])
    return { partition, offset: Number(message.offset), key: message.key.toString(), value: message.value.toString() }
  })
  const committed = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  const described = await admin.describeGroups([group])
  await consumer.disconnect()
  await admin.disconnect()
  return {
    created,
    listed: listed.includes(topic),
    partitions: metadata.topics[0].partitions.map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr })),
    sent,
    acks,
    consumed,
    committed: committed[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) })),
    group: described.groups.map((g) => ({ groupId: g.groupId, state: g.state, protocol: g.protocol, members: g.members.length })),
  }
}

async function remove() {
  const admin = kafkaClient().admin()
  await admin.connect()
  await admin.deleteTopics({ topics: [topic], timeout: 30000 })
  const listed = await admin.listTopics()
  await admin.disconnect()
  return { deleted: !listed.includes(topic) }
}

async function txn() {
  const n = Number(nArg)
  const kafka = kafkaClient()
  const transactionalId = `kjs-txn-${process.pid}-${Date.now()}`
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const batch = (tag) => Array.from({ length: n }, (_, i) => ({ partition: i % 3, value: `${tag}-${i}` }))
  const first = await producer.transaction()
  await first.send({ topic, acks: -1, messages: batch('kjs-c1') })
  await first.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }] })
  await first.commit()
  const second = await producer.transaction()
  await second.send({ topic, acks: -1, messages: batch('kjs-ab') })
  await second.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '9' }] }] })
  await second.abort()
  const third = await producer.transaction()
  await third.send({ topic, acks: -1, messages: batch('kjs-c2') })
  await third.commit()

  // a new instance with the same transactional id fences this one: its first transaction() sends
  // InitProducerId with the id, which bumps the epoch (connect() alone initializes only an idempotent id)
  const successor = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await successor.connect()
  await (await successor.transaction()).abort()
  let fenced = null
  try {
    const zombie = await producer.transaction()
    await zombie.send({ topic, acks: -1, messages: batch('kjs-zombie') })
    await zombie.commit()
  } catch (e) {
    fenced = e.type || e.name
  }
  await producer.disconnect().catch(() => {})
  await successor.disconnect()

  const consumer = kafka.consumer({ groupId: `${group}-reader`, readUncommitted: false, maxWaitTimeInMs: 300 })
  const consumed = await consumeAtLeast(consumer, 2 * n, true, async ({ partition, message }) => ({
    partition,
    value: message.value.toString(),
  }))
  await consumer.disconnect()
  const admin = kafka.admin()
  await admin.connect()
  const committed = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  await admin.disconnect()
  return {
    consumed,
    fenced,
    committed: committed[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) })),
  }
}

const run = mode === 'roundtrip' ? roundtrip : mode === 'delete' ? remove : mode === 'txn' ? txn : null
if (run === null) {
  console.error(`usage: node roundtrip.js roundtrip|delete|txn <bootstrap> <topic> [group n]`)
  process.exit(2)
}
printSummary(run)
