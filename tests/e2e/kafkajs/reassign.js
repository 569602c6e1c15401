// kafkajs's partition reassignments against rafka's Kafka wire listener: run by tests/e2e/test_wire_reassignments.py,
// which checks the JSON summary printed on the last line of stdout.
//
//   node reassign.js <bootstrap> <topic> <target broker> <n records>
//     admin.alterPartitionReassignments moves <topic>'s partition 0 to [<target broker>]
//     (AlterPartitionReassignments), admin.listPartitionReassignments (ListPartitionReassignments, every topic
//     and <topic>'s partition 0) until it is no longer listed, the partition's metadata then, every record read
//     back from the beginning by a kafkajs consumer (from the new replica, the only one left), then bad input the
//     broker must refuse per partition: a partition that does not exist and a broker that is not registered.
//     kafkajs has no cancel (its replicas must be an array). Prints what it saw and the request versions kafkajs
//     sent (from its DEBUG log, as versions.js).
'use strict'

const { Kafka, logLevel } = require('kafkajs')
const printSummary = require('./summary')

const [bootstrap, topic, targetArg, nArg] = process.argv.slice(2)
const target = Number(targetArg)
const n = Number(nArg)
const sent = []
const logCreator = () => ({ log }) => {
  const m = /^Request \w+\(key: (\d+), version: (\d+)\)/.exec(log.message || '')
  if (m) sent.push([Number(m[1]), Number(m[2])])
}

function failure(e) {
  const errors = e.errors || [e] // a KafkaJSAggregateError of one error per partition
  return errors.map((x) => ({ name: x.name, type: x.type || null, topic: x.topic || null, partition: x.partition ?? null }))
}

async function attempt(fn) {
  try {
    await fn()
    return null
  } catch (e) {
    return failure(e)
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function main() {
  const kafka = new Kafka({
    clientId: 'rafka-e2e-kafkajs-reassign',
    brokers: bootstrap.split(','),
    logLevel: logLevel.DEBUG,
    logCreator,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const out = { listings: [], sent }

  const t0 = Date.now()
  out.alter = await attempt(() =>
    admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [target] }] }], timeout: 30000 })
  )
  for (;;) {
    const all = await admin.listPartitionReassignments({ timeout: 5000 })
    const one = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [0] }], timeout: 5000 })
    const mine = all.topics.filter((t) => t.name === topic)
    out.listings.push({ all: mine, one: one.topics })
    if (mine.length === 0 && one.topics.length === 0) break
    if (Date.now() - t0 > 90000) throw new Error('the reassignment was still listed after 90 s')
    await sleep(100)
  }
  out.completed_ms = Date.now() - t0
  // the broker's metadata follows the controller's: until it shows the target alone
  for (;;) {
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    const p = md.topics[0].partitions.find((x) => x.partitionId === 0)
    out.metadata = { leader: p.leader, replicas: p.replicas, isr: p.isr }
    if ((p.replicas.length === 1 && p.replicas[0] === target && p.leader === target) || Date.now() - t0 > 90000) break
    await sleep(200)
  }

  const consumer = kafka.consumer({ groupId: `reassign-${topic}`, maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await consumer.run({ eachMessage: async ({ partition, message }) => { if (partition === 0) values.push(message.value.toString()) } })
  while (values.length < n && Date.now() - t0 < 120000) await sleep(100)
  await consumer.disconnect()
  out.values = values

  out.unknown_partition = await attempt(() =>
    admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 7, replicas: [target] }] }] })
  )
  out.unregistered_broker = await attempt(() =>
    admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: [target, 99] }] }] })
  )
  out.after_bad = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [0] }] })
  await admin.disconnect()
  return out
}

printSummary(main)
