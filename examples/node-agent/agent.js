// A message-only agent in Node.js: it serves `email.send_welcome` (the last step of the shipped
// `provision-tenant` workflow) and `conformance.echo` (the agent the conformance kit drives:
// docs/agents.md, "Check an agent with the conformance kit"), and holds no storage rights beyond its pool's work queue and the
// result queue. It never touches the ledger: it says "still running" with heartbeat messages and
// reports its outcome with a result message, each carrying the work message's `reply_token`, and
// the app records them in the ledger for it (docs/agents.md, "Write an agent in another language").
//
// Settings are the app's: AGENT_TRANSPORT (storage-queue | servicebus), AzureWebJobsStorage or
// ServiceBusConnection, WORK_QUEUE_NAME, RESULT_QUEUE_NAME; plus AGENT_POOL (the pool it serves:
// its queue is WORK_QUEUE_NAME for `default`, else `<WORK_QUEUE_NAME>-<pool>`), MAIL_OUTBOX (the
// directory that stands in for the remote mail service), HEARTBEAT_SECONDS and WORK_MILLISECONDS;
// CONFORMANCE_EFFECTS (the file the conformance kit reads conformance.echo's effects from);
// ASK_SECONDS (how long to wait for the app's answer before an effect, default 30) and, on Service
// Bus only, ANSWER_QUEUE (the answer queue the operator provisioned for this agent, named
// `<RESULT_QUEUE_NAME>-answers-...`; on Storage Queues the agent creates its own at start).
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { QueueClient } = require('@azure/storage-queue');
const { ServiceBusClient } = require('@azure/service-bus');

const env = process.env;
const AGENT = 'email.send_welcome';
const SERVED = [AGENT, 'conformance.echo']; // any other agent's message is misrouted: dead-lettered
const ENVELOPE = 'workflow-message/1'; // the Storage Queue envelope (workflow_core/transport/envelope.py)
const pool = env.AGENT_POOL || 'default';
const workQueue = `${env.WORK_QUEUE_NAME || 'agent-work'}${pool === 'default' ? '' : `-${pool}`}`;
const resultQueue = env.RESULT_QUEUE_NAME || 'agent-results';
const heartbeatSeconds = Number(env.HEARTBEAT_SECONDS || 120);
const workMs = Number(env.WORK_MILLISECONDS || 0);
const outbox = env.MAIL_OUTBOX || path.join(__dirname, 'outbox');
const askMs = Number(env.ASK_SECONDS || 30) * 1000; // the longest wait for an answer before an effect
const answersPrefix = `${resultQueue}-answers-`; // the app answers only queues named so
const log = (...parts) => console.log(new Date().toISOString(), ...parts);
let stopping = false; // SIGTERM or SIGINT: finish the message in hand (no new wait for an answer), then stop

// The remote mail service, idempotent on the key: one file per key, created once ('wx'). A second
// delivery, or a retry after a crash, finds the file and returns what the first send returned.
function sendWelcome(key, input) {
  fs.mkdirSync(outbox, { recursive: true });
  const file = path.join(outbox, `${crypto.createHash('sha256').update(key).digest('hex')}.json`);
  const mail = { message_id: `<${crypto.randomUUID()}@mail.example.net>`, to: input.to, template: 'welcome',
    hostname: input.hostname ?? null, idempotency_key: key };
  try {
    fs.writeFileSync(file, JSON.stringify(mail), { flag: 'wx' });
    log('sent welcome mail', mail.message_id, 'for', key);
  } catch (err) {
    if (err.code !== 'EEXIST') throw err;
    log('already sent for', key);
  }
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// conformance.echo: its effect, a line with the key in CONFORMANCE_EFFECTS, once per key (a marker
// file created once, 'wx', is the dedupe record; unset: no effect to make, as for the recovery canary);
// slow_seconds of work after a heartbeat; crash_once names a file: if it does not exist yet, create it
// and exit hard right after the effect. The recovery canary's faults, while attempt <= fault_attempts
// (default 1) and before the effect: `fail` throws, `fail-permanently` throws with `permanent`,
// `silent` and `heartbeat-then-silent` (after one more heartbeat) return ECHO_SILENT: no reply. A
// compensate message needs nothing undone: {undone: true}.
const ECHO_SILENT = Symbol('no reply');
async function echo(key, work, heartbeat) {
  if (work.kind === 'compensate') return { undone: true };
  const input = work.input || {};
  const fault = input.fault || 'none';
  const faultAttempts = input.fault_attempts === undefined ? 1 : input.fault_attempts;
  if (fault !== 'none') {
    if (!['silent', 'fail', 'fail-permanently', 'heartbeat-then-silent'].includes(fault) || !Number.isInteger(faultAttempts)) {
      throw Object.assign(new Error('fault must be one of none, silent, fail, fail-permanently, heartbeat-then-silent'), { permanent: true });
    }
    if (work.attempt <= faultAttempts) {
      if (fault === 'fail') throw new Error(`conformance.echo fault fail: attempt ${work.attempt} fails`);
      if (fault === 'fail-permanently') {
        throw Object.assign(new Error(`conformance.echo fault fail-permanently: attempt ${work.attempt}`), { permanent: true });
      }
      if (fault === 'heartbeat-then-silent') await heartbeat();
      return ECHO_SILENT;
    }
  }
  if (input.slow_seconds) {
    await heartbeat(input.heartbeat_seconds);
    await new Promise((resolve) => setTimeout(resolve, input.slow_seconds * 1000));
  }
  const effects = env.CONFORMANCE_EFFECTS;
  try {
    if (effects) {
      fs.writeFileSync(`${effects}.${crypto.createHash('sha256').update(key).digest('hex')}`, '', { flag: 'wx' });
      fs.appendFileSync(effects, `${key}\n`);
    }
  } catch (err) {
    if (err.code !== 'EEXIST') throw err;
  }
  if (input.crash_once && !fs.existsSync(input.crash_once)) {
    fs.writeFileSync(input.crash_once, '');
    process.exit(3);
  }
  return { echo: input.value };
}

const ids = (work) => ({ kind: work.kind, instance_id: work.instance_id, orchestration_id: work.orchestration_id,
  step_id: work.step_id, attempt: work.attempt, reply_token: work.reply_token });

// The fields docs/schemas/work-message.schema.json requires, with their types: anything else is parked.
const isWork = (work) => Boolean(work) && typeof work === 'object' && ['work', 'compensate'].includes(work.kind)
  && /^[0-9a-f]{64}$/.test(work.reply_token || '') && typeof work.step_id === 'string' && work.step_id !== ''
  && typeof work.instance_id === 'string' && work.instance_id !== '' && typeof work.agent === 'string'
  && Number.isInteger(work.attempt) && work.attempt >= 1 && typeof work.idempotency_key === 'string'
  && !Number.isNaN(Date.parse(work.deadline)) && !Number.isNaN(Date.parse(work.expires_at))
  && (work.input === undefined || (typeof work.input === 'object' && work.input !== null && !Array.isArray(work.input)));

// Its attempt is over (the app gave it up, maybe compensated): doing it now would be an effect nobody wants.
const isExpired = (work) => Date.parse(work.expires_at) <= Date.now();

// A value stored in the app's payload container: this agent holds no rights to read it. Only a value
// it needs counts: a work input (both agents read theirs); conformance.echo's compensation reads nothing.
const isBlobReference = (value) => Boolean(value) && typeof value === 'object' && typeof value.$blob === 'string'
  && Number.isInteger(value.size) && Object.keys(value).length === 2;
const needsBlob = (work) => work.kind === 'work' && isBlobReference(work.input);

async function handle(work, queues) {
  const idOf = (what) => `${what}:${work.instance_id}:${work.step_id}:${work.attempt}`;
  // Heartbeat: claims the step for this agent and moves its deadline, on the ledger's clock.
  const heartbeat = (seconds) => queues.send({ type: 'heartbeat', ...ids(work), seconds: seconds || heartbeatSeconds },
    `${idOf('heartbeat')}:${Date.now()}`);
  // 0. An input it cannot read: refused for good (no retry makes it readable). A refusal is no
  // effect, so it needs no question first; a stale one is refused by its token.
  if (needsBlob(work)) {
    await queues.send({ ...ids(work), outcome: 'failed', permanent: true,
      error: 'input is a blob reference; this agent holds no right to read the payload container' }, idOf('result'));
    return 'done';
  }
  // 1. Ask before any effect: the first heartbeat names the answer queue, and the app answers whether
  // this attempt is still the ledger's current one. Not current (given up, retried, compensated):
  // no effect and no reply. No answer in time: leave the message, it is delivered again.
  if (queues.answerQueue) {
    const correlationId = crypto.randomUUID();
    const answer = await queues.ask({ type: 'heartbeat', ...ids(work), seconds: heartbeatSeconds,
      answer_queue: queues.answerQueue, correlation_id: correlationId }, `${idOf('heartbeat')}:${Date.now()}`, correlationId);
    if (!answer) return 'unanswered';
    if (answer.current !== true) {
      log(`attempt ${work.attempt} of ${work.instance_id}/${work.step_id} is not current (${answer.status}): ${answer.reason}`);
      return 'not-current';
    }
  } else {
    await heartbeat();
  }
  let reply;
  try {
    const key = work.idempotency_key || `${work.instance_id}:${work.step_id}`;
    let output;
    if (work.agent === 'conformance.echo') {
      output = await echo(key, work, heartbeat);
    } else {
      if (work.agent !== AGENT || work.kind !== 'work') throw new Error(`no handler for ${work.kind} of ${work.agent}`);
      await new Promise((resolve) => setTimeout(resolve, workMs));
      output = sendWelcome(key, work.input || {});
    }
    reply = output === ECHO_SILENT ? null : { ...ids(work), outcome: 'succeeded', output };
  } catch (err) {
    reply = { ...ids(work), outcome: 'failed', error: String(err && err.stack || err).slice(0, 8000), ...(err && err.permanent && { permanent: true }) };
  }
  // 2. The result: the app records it in the ledger for this attempt (once) and moves the workflow on.
  if (reply) await queues.send(reply, idOf('result'));
  return 'done';
}

// Wait up to askMs for the answer carrying `correlationId` on an answer queue read with `receive()`.
// Answers are routed by correlation_id: this agent has one delivery in flight, so an answer with any
// other id belongs to an earlier question nobody waits for any more, and is deleted. An agent with
// several deliveries in flight hands each answer to the delivery waiting for its id instead.
async function awaitAnswer(receive, correlationId) {
  const until = Date.now() + askMs;
  while (Date.now() < until && !stopping) {
    for (const { body, remove } of await receive()) {
      await remove();
      if (body && body.type === 'attempt-status' && body.correlation_id === correlationId) return body;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return null;
}

function storageQueues() {
  const connection = env.AzureWebJobsStorage;
  const work = new QueueClient(connection, workQueue);
  const results = new QueueClient(connection, resultQueue);
  // Its own answer queue, made at start and deleted at stop: rights to create, read and delete it.
  const answerQueue = `${answersPrefix}${crypto.randomBytes(4).toString('hex')}`;
  const answers = new QueueClient(connection, answerQueue);
  const encode = (body, messageId) => Buffer.from(JSON.stringify({ envelope: ENVELOPE, message_id: messageId,
    correlation_id: null, subject: body.type || `${body.kind}-result`, application_properties: {}, body })).toString('base64');
  return {
    async receive() {
      const { receivedMessageItems } = await work.receiveMessages({ numberOfMessages: 1, visibilityTimeout: 60 });
      return receivedMessageItems.map((item) => {
        let body = null;
        try {
          const doc = JSON.parse(Buffer.from(item.messageText, 'base64').toString('utf8'));
          body = doc && doc.envelope === ENVELOPE ? doc.body : doc;
        } catch (err) { /* not ours: parked below */ }
        return { body, complete: () => work.deleteMessage(item.messageId, item.popReceipt),
          park: async (description, reason = 'MalformedMessage') => {
            const poison = new QueueClient(connection, `${workQueue}-poison`);
            await poison.createIfNotExists();
            await poison.sendMessage(Buffer.from(JSON.stringify({ envelope: ENVELOPE, message_id: item.messageId,
              body: body || { text: item.messageText }, application_properties: {}, dead_letter_reason: reason,
              dead_letter_description: description })).toString('base64'));
            await work.deleteMessage(item.messageId, item.popReceipt);
          } };
      });
    },
    send: (body, messageId) => results.sendMessage(encode(body, messageId)),
    answerQueue,
    open: () => answers.createIfNotExists(),
    async ask(body, messageId, correlationId) {
      await results.sendMessage(encode(body, messageId));
      return awaitAnswer(async () => {
        const { receivedMessageItems } = await answers.receiveMessages({ numberOfMessages: 32, visibilityTimeout: 30 });
        return receivedMessageItems.map((item) => {
          let answer = null;
          try {
            const doc = JSON.parse(Buffer.from(item.messageText, 'base64').toString('utf8'));
            answer = doc && doc.envelope === ENVELOPE ? doc.body : doc;
          } catch (err) { /* not an answer: deleted */ }
          return { body: answer, remove: () => answers.deleteMessage(item.messageId, item.popReceipt) };
        });
      }, correlationId);
    },
    close: () => answers.deleteIfExists(),
  };
}

function serviceBus() {
  const client = new ServiceBusClient(env.ServiceBusConnection);
  const receiver = client.createReceiver(workQueue);
  const sender = client.createSender(resultQueue);
  // Service Bus queues are the operator's (infra), not the agent's: ANSWER_QUEUE names the one
  // provisioned for this agent (one per agent process). Without it the agent does not ask.
  const answerQueue = env.ANSWER_QUEUE || null;
  if (answerQueue && !answerQueue.startsWith(answersPrefix)) {
    throw new Error(`ANSWER_QUEUE must begin with ${answersPrefix}: the app answers no other queue`);
  }
  const answers = answerQueue ? client.createReceiver(answerQueue, { receiveMode: 'receiveAndDelete' }) : null;
  const sendBody = (body, messageId) => sender.sendMessages({ body: Buffer.from(JSON.stringify(body)), messageId,
    contentType: 'application/json', subject: body.type || `${body.kind}-result` });
  return {
    async receive() {
      const messages = await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 });
      return messages.map((m) => {
        let body = m.body;
        try { body = Buffer.isBuffer(body) ? JSON.parse(body.toString('utf8')) : body; } catch (err) { body = null; }
        return { body, complete: () => receiver.completeMessage(m),
          park: (description, reason = 'MalformedMessage') => receiver.deadLetterMessage(m,
            { deadLetterReason: reason, deadLetterErrorDescription: description }) };
      });
    },
    send: sendBody,
    answerQueue,
    open: async () => {},
    async ask(body, messageId, correlationId) {
      await sendBody(body, messageId);
      return awaitAnswer(async () => (await answers.receiveMessages(10, { maxWaitTimeInMs: 1000 })).map((m) => {
        let answer = m.body;
        try { answer = Buffer.isBuffer(answer) ? JSON.parse(answer.toString('utf8')) : answer; } catch (err) { answer = null; }
        return { body: answer, remove: async () => {} }; // received and deleted already
      }), correlationId);
    },
    close: () => client.close(),
  };
}

async function main() {
  const queues = (env.AGENT_TRANSPORT || 'servicebus').toLowerCase() === 'storage-queue' ? storageQueues() : serviceBus();
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => { stopping = true; });
  await queues.open();
  const asking = queues.answerQueue ? `, asking on ${queues.answerQueue}` : ', not asking (no answer queue)';
  log(`serving ${AGENT} and conformance.echo from ${workQueue}, replying to ${resultQueue}${asking}`);
  while (!stopping) {
    const received = await queues.receive();
    for (const message of received) {
      if (!isWork(message.body)) {
        log('parked a message that is not a work message with a reply_token');
        await message.park('not a work message with a reply_token');
        continue;
      }
      if (isExpired(message.body)) {
        log(`refused expired work ${message.body.instance_id}/${message.body.step_id} attempt ${message.body.attempt}`);
        await message.complete(); // no heartbeat, no effect, no reply
        continue;
      }
      if (!SERVED.includes(message.body.agent)) { // a routing error: no heartbeat (no claim), no reply
        const why = `agent '${message.body.agent}' is not served by pool '${pool}' (it serves ${SERVED.join(', ')})`;
        log(`dead-lettered misrouted work ${message.body.instance_id}/${message.body.step_id}: ${why}`);
        await message.park(why, 'MisroutedMessage');
        continue;
      }
      try {
        const done = await handle(message.body, queues);
        if (done === 'unanswered') {
          log(`no answer within ${askMs} ms: left for a later delivery`); // its lock (visibility timeout) expires
          continue;
        }
        // only after the reply is sent (or, not current, none is due): a crash before means a redelivery
        await message.complete();
      } catch (err) {
        log('will be delivered again:', err.message); // its lock (visibility timeout) expires
      }
    }
    if (!received.length) await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await queues.close();
  log('stopped');
}

main().catch((err) => { console.error(err); process.exit(1); });
