// kafkajs's consume-transform-produce loop against rafka's Kafka wire listener: run by
// tests/e2e/test_wire_offset_commits.py, which checks the JSON summary printed on the last line of stdout.
//
//   node eos.js <bootstrap> <source> <out> <group> <n>
//     seeds n records on the source topic's 3 partitions, then a group member (eachBatch, autoCommit off)
//     turns each batch into one transaction of a transactional producer: the outputs on the out topic and
//     the member's offsets (sendOffsets: AddOffsetsToTxn, then TxnOffsetCommit v1, which carries no member
//     id or generation) while the member is in the group. Prints the transactions, the first error, the
//     group as described while the member was in it, and its committed offsets.
'use strict'

const { Kafka, logLevel } = require('kafkajs')
const printSummary = require('./summary')

const [bootstrap, source, out, group, nArg] = process.argv.slice(2)

async function main() {
  const n = Number(nArg)
  const kafka = new Kafka({
    clientId: 'rafka-e2e-kafkajs-eos',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
  })
  const seed = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await seed.connect()
  await seed.send({ topic: source, acks: -1, messages: Array.from({ length: n }, (_, i) => ({ partition: i % 3, value: `in-${i}` })) })
  await seed.disconnect()

  const producer = kafka.producer({ transactionalId: `kjs-eos-${process.pid}-${Date.now()}`, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 300 })
  await consumer.connect()
  await consumer.subscribe({ topics: [source], fromBeginning: true })
  let processed = 0
  let transactions = 0
  let failure = null
  let finished
  const done = new Promise((resolve) => (finished = resolve))
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      if (failure !== null || batch.messages.length === 0) return
      const last = batch.messages[batch.messages.length - 1]
      const txn = await producer.transaction()
      try {
        await txn.send({
          topic: out,
          acks: -1,
          messages: batch.messages.map((m) => ({ partition: batch.partition, value: `out-${m.value.toString()}` })),
        })
        await txn.sendOffsets({
          consumerGroupId: group,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(last.offset) + 1n).toString() }] }],
        })
        await txn.commit()
      } catch (e) {
        failure = `${e.type || e.name}: ${e.message}`
        await txn.abort().catch(() => {})
        finished()
        return
      }
      for (const m of batch.messages) resolveOffset(m.offset)
      transactions += 1
      processed += batch.messages.length
      await heartbeat()
      if (processed >= n) finished()
    },
  })
  const timer = setTimeout(() => {
    failure = failure || `timed out: ${processed} of ${n} processed`
    finished()
  }, 60000)
  await done
  clearTimeout(timer)
  const admin = kafka.admin()
  await admin.connect()
  const described = await admin.describeGroups([group]) // the member is still in the group
  await consumer.disconnect()
  await producer.disconnect()
  const committed = await admin.fetchOffsets({ groupId: group, topics: [source] })
  await admin.disconnect()
  return {
    processed,
    transactions,
    failure,
    group: described.groups.map((g) => ({ state: g.state, members: g.members.length })),
    committed: committed[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) })),
  }
}

printSummary(main)
