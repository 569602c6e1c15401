// kafkajs's offset commits to partitions that do not exist, against rafka's Kafka wire listener: run by
// tests/e2e/test_wire_offset_commits.py, which checks the JSON summary printed on the last line of stdout.
//
//   node offsets.js <bootstrap> <topic> <ghost> <group>
//     <topic> exists with 2 partitions and one record on partition 0; <ghost> does not exist. A member of
//     <group> (autoCommit off) subscribes to <topic>; in its first batch it commits, through eachBatch's
//     commitOffsetsIfNecessary(offsets) (OffsetCommit with its member id and generation, no retry):
//       ghost: <ghost> partition 0; past: <topic> partition 7; mixed: <topic> partition 0 with partition 7
//       and <ghost> partition 1.
//     Then the consumer's own commitOffsets (retried by kafkajs until its retries run out) of <topic>
//     partition 9. Prints what kafkajs reported for each commit, what admin.fetchOffsets showed of the group
//     after the two refused ones and at the end (every topic of the group: OffsetFetch with no topics), and
//     whether <ghost> was listed afterwards.
'use strict'

const { Kafka, logLevel } = require('kafkajs')
const printSummary = require('./summary')

const [bootstrap, topic, ghost, group] = process.argv.slice(2)

function outcome(e) {
  if (e === null) return { ok: true }
  const cause = e.originalError || e.cause || e
  return { ok: false, name: e.name, type: cause.type || null, retriable: cause.retriable === true }
}

async function groupOffsets(admin) {
  const all = await admin.fetchOffsets({ groupId: group })
  return all
    .flatMap(({ topic: t, partitions }) => partitions.map((p) => ({ topic: t, partition: p.partition, offset: Number(p.offset) })))
    .filter((o) => o.offset >= 0)
}

async function main() {
  const kafka = new Kafka({
    clientId: 'rafka-e2e-kafkajs-offsets',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 300 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const seed = kafka.producer()
  await seed.connect()
  await seed.send({ topic, acks: -1, messages: [{ partition: 0, value: 'x' }] })
  await seed.disconnect()

  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 300 })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const commits = {}
  let storedAfterRefused = null
  let failure = null
  let finished
  const done = new Promise((resolve) => (finished = resolve))
  let first = true
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ commitOffsetsIfNecessary }) => {
      if (!first) return
      first = false
      try {
        const attempt = async (name, topics) => {
          let err = null
          try {
            await commitOffsetsIfNecessary({ topics })
          } catch (e) {
            err = e
          }
          commits[name] = outcome(err)
        }
        await attempt('ghost', [{ topic: ghost, partitions: [{ partition: 0, offset: '5' }] }])
        await attempt('past', [{ topic, partitions: [{ partition: 7, offset: '4' }] }])
        storedAfterRefused = await groupOffsets(admin)
        await attempt('mixed', [
          { topic, partitions: [{ partition: 0, offset: '1' }, { partition: 7, offset: '4' }] },
          { topic: ghost, partitions: [{ partition: 1, offset: '4' }] },
        ])
      } catch (e) {
        failure = String(e && e.stack ? e.stack : e)
      }
      finished()
    },
  })
  const timer = setTimeout(() => {
    failure = failure || 'timed out: no batch'
    finished()
  }, 60000)
  await done
  clearTimeout(timer)
  let publicCommit = null
  try {
    await consumer.commitOffsets([{ topic, partition: 9, offset: '3' }])
  } catch (e) {
    publicCommit = e
  }
  commits.consumerCommitOffsets = outcome(publicCommit)
  await consumer.disconnect()
  const stored = await groupOffsets(admin)
  const listed = await admin.listTopics()
  await admin.disconnect()
  return { failure, commits, storedAfterRefused, stored, ghostListed: listed.includes(ghost) }
}

printSummary(main)
