// How the scripts end: ``printSummary(main)`` prints what ``main()`` resolves to as one JSON line on stdout (the
// Python tests read the last line, tests/e2e/conftest.py's ``kafkajs`` fixture) and exits 0; a failure prints
// its stack on stderr and exits 1.
'use strict'

module.exports = function printSummary(main) {
  main().then(
    (summary) => {
      console.log(JSON.stringify(summary))
      process.exit(0)
    },
    (err) => {
      console.error(err && err.stack ? err.stack : String(err))
      process.exit(1)
    },
  )
}
