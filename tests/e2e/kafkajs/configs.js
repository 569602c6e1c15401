// kafkajs's topic configs against rafka's Kafka wire listener: run by tests/e2e/test_wire_kafkajs.py, which
// checks the JSON summary printed on the last line of stdout.
//
//   node configs.js <bootstrap> <topic> <bad-topic>
//     admin.createTopics of <topic> with Kafka topic configs (CreateTopics), then of <bad-topic> with a value
//     Kafka's validator refuses; describeConfigs (DescribeConfigs) after each step; then two
//     admin.alterConfigs (kafkajs only has the legacy AlterConfigs, api key 33, whose request replaces the
//     topic's whole set of overrides) and one with a refused value. Prints, per step, the error kafkajs
//     reported and the described configs ({name: [value, configSource, isDefault]}), the topics listed, and
//     the request versions kafkajs sent (from its DEBUG log, as versions.js).
'use strict'

const { Kafka, ConfigResourceTypes, logLevel } = require('kafkajs')
const printSummary = require('./summary')

const [bootstrap, topic, badTopic] = process.argv.slice(2)
const sent = []
const logCreator = () => ({ log }) => {
  const m = /^Request \w+\(key: (\d+), version: (\d+)\)/.exec(log.message || '')
  if (m) sent.push([Number(m[1]), Number(m[2])])
}

function failure(e) {
  if (e === null) return null
  const errors = e.errors || [e] // createTopics: a KafkaJSAggregateError of one error per topic
  return errors.map((x) => ({ name: x.name, type: x.type || null, topic: x.topic || null }))
}

async function attempt(fn) {
  try {
    await fn()
    return null
  } catch (e) {
    return failure(e)
  }
}

async function main() {
  const kafka = new Kafka({
    clientId: 'rafka-e2e-kafkajs-configs',
    brokers: bootstrap.split(','),
    logLevel: logLevel.DEBUG,
    logCreator,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const describe = async () => {
    const { resources } = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
      includeSynonyms: false,
    })
    const out = {}
    for (const c of resources[0].configEntries) out[c.configName] = [c.configValue, c.configSource, c.isDefault]
    return out
  }
  const alter = (configEntries) => () =>
    admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries }] })

  const steps = {}
  steps.create = {
    error: await attempt(() =>
      admin.createTopics({
        topics: [
          {
            topic,
            numPartitions: 1,
            replicationFactor: 1,
            configEntries: [
              { name: 'compression.type', value: 'zstd' },
              { name: 'file.delete.delay.ms', value: '30000' },
              { name: 'retention.ms', value: '3600000' },
              { name: 'preallocate', value: 'true' },
            ],
          },
        ],
        waitForLeaders: true,
        timeout: 30000,
      }),
    ),
  }
  steps.create.configs = await describe()
  steps.createBad = {
    error: await attempt(() =>
      admin.createTopics({
        topics: [{ topic: badTopic, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'compression.type', value: 'brotli' }] }],
        timeout: 30000,
      }),
    ),
  }
  steps.alter1 = { error: await attempt(alter([{ name: 'retention.ms', value: '7200000' }, { name: 'cleanup.policy', value: 'compact' }])) }
  steps.alter1.configs = await describe()
  steps.alter2 = { error: await attempt(alter([{ name: 'retention.ms', value: '1800000' }])) }
  steps.alter2.configs = await describe()
  steps.alterBad = { error: await attempt(alter([{ name: 'min.insync.replicas', value: '0' }])) }
  steps.alterBad.configs = await describe()
  const listed = await admin.listTopics()
  await admin.disconnect()
  return { steps, listed: listed.filter((t) => t === topic || t === badTopic), sent }
}

printSummary(main)
