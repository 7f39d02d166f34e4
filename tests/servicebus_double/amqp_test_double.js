#!/usr/bin/env node
// A protocol-level AMQP 1.0 TEST DOUBLE for Azure Service Bus queues, built on rhea.
//
// It answers exactly what the azure-servicebus Python SDK needs to send, receive and settle on a
// queue, so tests can drive the real SDK (and our ServiceBusTransport on top of it) over a real
// socket. It is NOT a broker: no lock expiry, no delivery limit, no duplicate detection, no TTL, no
// sessions, no topics, no authentication. Those broker semantics are covered elsewhere (the transport
// contract suite on Storage Queues, and its Service Bus run against the real emulator or a namespace).
//
// What it implements, each item being something the SDK checks:
// - SASL ANONYMOUS; every attach is answered with both source and target (and the client's settle
//   modes echoed: peek-lock receivers attach with rcv-settle-mode "second").
// - $cbs: a put-token request is answered with application properties status-code 202 and
//   status-description, correlation-id = the request's message-id. Tokens are not checked.
// - Queues are created on first use. "<queue>/$DeadLetterQueue" is the dead-letter sub-queue.
// - Sends: single messages, and batches (message format 0x80013700: one encoded message per data
//   section) are split into their messages.
// - Peek-lock deliveries: a random 16-byte delivery tag is the lock token; message annotations carry
//   x-opt-sequence-number, x-opt-enqueued-time and x-opt-locked-until; header.delivery-count is the
//   number of earlier deliveries (Service Bus convention: DeliveryCount - 1).
// - Settlement: the outcome is echoed back settled (a rejected echo without error). accepted = complete; modified = abandon (back to
//   the queue, delivery count + 1); released = back without counting; rejected = dead-letter: moved to
//   "<queue>/$DeadLetterQueue" with DeadLetterReason / DeadLetterErrorDescription application
//   properties taken from the error info, as Service Bus does.
// - "<entity>/$management": com.microsoft:renew-lock (returns {expirations: [timestamp]}) and
//   com.microsoft:update-disposition; other operations get status 501.
// - Messages still locked when their receiver link or connection goes away are put back (a real
//   broker would wait for the lock to expire).
//
// - Refusals a test asks for on the control channel (below): "refuse-receive <queue>" answers a receiver's
//   attach with amqp:unauthorized-access (an identity without Listen), "missing <queue>" answers every
//   attach to that queue with amqp:not-found (a queue infra did not create).
//
// Usage: node amqp_test_double.js [--host 127.0.0.1] [--port 0] [--lock-duration-seconds 30] [--verbose]
// Prints "LISTENING <port>" on stdout when ready. Reads control commands on stdin (see the end of this
// file: "state" reports what each queue holds). Exits when stdin closes or on SIGTERM/SIGINT.
'use strict';

const crypto = require('crypto');
const rhea = require('rhea');

const types = rhea.types;
const amqpMessage = rhea.message;

// rhea decodes the one-byte AMQP boolean (0x56, which the Python SDK writes) as the number 0/1; read it
// as a boolean so application properties keep their type when the double re-encodes a message.
types.by_code[0x56].read = (buffer, offset) => buffer.readUInt8(offset) !== 0;
types.by_code[0x56].write = (buffer, value, offset) => buffer.writeUInt8(value ? 1 : 0, offset);

const BATCH_FORMAT = 0x80013700;
const DEAD_LETTER_SUFFIX = '/$DeadLetterQueue';
const MANAGEMENT_SUFFIX = '/$management';
const CBS = '$cbs';

function parseArgs(argv) {
    const options = { host: '127.0.0.1', port: 0, lockDurationSeconds: 30, verbose: false };
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (arg === '--host') options.host = argv[++i];
        else if (arg === '--port') options.port = Number(argv[++i]);
        else if (arg === '--lock-duration-seconds') options.lockDurationSeconds = Number(argv[++i]);
        else if (arg === '--verbose') options.verbose = true;
        else throw new Error('unknown argument ' + arg);
    }
    return options;
}

const options = parseArgs(process.argv.slice(2));

function log(...parts) {
    if (options.verbose) console.error('[amqp-test-double]', ...parts);
}

// ---- state -------------------------------------------------------------------------------------

const queues = new Map(); // entity path -> { messages: [stored], senders: Set<rhea sender> }
const refusals = new Map(); // entity path -> 'refuse-receive' | 'missing'
const locks = new Map(); // lock token (hex of the 16-byte delivery tag) -> lock
let nextSequenceNumber = 1;

function queueFor(entity) {
    let queue = queues.get(entity);
    if (!queue) {
        queue = { messages: [], senders: new Set() };
        queues.set(entity, queue);
    }
    return queue;
}

// Link addresses may be bare ("q") or full URIs ("amqp://host:port/q"); keep the entity path.
function entityOf(address) {
    if (!address) return '';
    const match = /^[a-z][a-z0-9+.-]*:\/\/[^/]+\/(.*)$/i.exec(address);
    return match ? match[1] : address;
}

function enqueue(entity, msg) {
    const stored = { sequenceNumber: nextSequenceNumber++, enqueuedTime: new Date(), deliveries: 0, msg };
    queueFor(entity).messages.push(stored);
    log('enqueued', entity, 'seq', stored.sequenceNumber, 'message-id', msg.message_id);
    deliverAvailable(entity);
}

// Put a message back in sequence-number order (as Service Bus does when a lock is released).
function requeue(entity, stored) {
    const messages = queueFor(entity).messages;
    let index = messages.findIndex((m) => m.sequenceNumber > stored.sequenceNumber);
    if (index < 0) index = messages.length;
    messages.splice(index, 0, stored);
    deliverAvailable(entity);
}

// ---- delivering (peek-lock) -----------------------------------------------------------------------

// rhea takes credit only when it writes a transfer (on the next tick), so count what this link has
// queued but not yet written: a receiver that granted one credit gets (and locks) one message.
function creditLeft(sender) {
    const outgoing = sender.session.outgoing;
    let unsent = 0;
    for (let id = outgoing.next_pending_delivery; id < outgoing.next_delivery_id; id++) {
        const delivery = outgoing.deliveries.by_id(id);
        if (delivery && delivery.link === sender) unsent++;
    }
    return sender.credit - unsent;
}

function deliverAvailable(entity) {
    const queue = queueFor(entity);
    for (const sender of queue.senders) {
        while (queue.messages.length && sender.is_open() && creditLeft(sender) > 0) {
            deliver(entity, sender, queue.messages.shift());
        }
        if (sender._draining_requested) finishDrain(sender);
    }
}

function finishDrain(sender) {
    if (sender.is_open() && sender.credit > 0) sender.set_drained(true);
    sender._draining_requested = false;
}

function deliver(entity, sender, stored) {
    const tag = crypto.randomBytes(16);
    const lockedUntil = new Date(Date.now() + options.lockDurationSeconds * 1000);
    // rhea keeps header and properties fields at the top level of a message object.
    const outgoing = Object.assign({}, stored.msg, { delivery_count: stored.deliveries });
    outgoing.message_annotations = Object.assign({}, stored.msg.message_annotations || {}, {
        'x-opt-sequence-number': types.wrap_long(stored.sequenceNumber),
        'x-opt-enqueued-time': stored.enqueuedTime,
        'x-opt-locked-until': lockedUntil,
    });
    stored.deliveries += 1;
    const delivery = sender.send(outgoing, tag);
    const lock = { token: tag.toString('hex'), entity, stored, sender, delivery, lockedUntil };
    locks.set(lock.token, lock);
    delivery._lock = lock;
    log('delivered', entity, 'seq', stored.sequenceNumber, 'delivery', stored.deliveries, 'lock', lock.token);
}

// The SDK reports a lock token as uuid.UUID(bytes_le=delivery_tag) and sends it back as an AMQP uuid
// (RFC 4122 byte order): swap the first three fields back to get the delivery tag.
function tagHexFromUuid(uuidBytes) {
    const b = Buffer.from(uuidBytes);
    const tag = Buffer.concat([
        Buffer.from(b.subarray(0, 4)).reverse(),
        Buffer.from(b.subarray(4, 6)).reverse(),
        Buffer.from(b.subarray(6, 8)).reverse(),
        b.subarray(8, 16),
    ]);
    return tag.toString('hex');
}

// ---- settling -------------------------------------------------------------------------------------

function settleLock(lock, outcome, info) {
    locks.delete(lock.token);
    const { entity, stored } = lock;
    if (outcome === 'complete') {
        log('completed', entity, 'seq', stored.sequenceNumber);
    } else if (outcome === 'abandon') {
        log('abandoned', entity, 'seq', stored.sequenceNumber);
        requeue(entity, stored);
    } else if (outcome === 'release') {
        stored.deliveries = Math.max(0, stored.deliveries - 1); // not a delivery attempt
        requeue(entity, stored);
    } else if (outcome === 'dead-letter') {
        const dead = Object.assign({}, stored.msg);
        dead.application_properties = Object.assign({}, stored.msg.application_properties || {}, {
            DeadLetterReason: (info && info.reason) || '',
            DeadLetterErrorDescription: (info && info.description) || '',
        });
        log('dead-lettered', entity, 'seq', stored.sequenceNumber, 'reason', info && info.reason);
        const dlq = entity.endsWith(DEAD_LETTER_SUFFIX) ? entity : entity + DEAD_LETTER_SUFFIX;
        const copy = { sequenceNumber: nextSequenceNumber++, enqueuedTime: stored.enqueuedTime, deliveries: 0 };
        copy.msg = dead;
        queueFor(dlq).messages.push(copy);
        deliverAvailable(dlq);
    }
}

function infoValue(info, key) {
    if (!info) return undefined;
    const value = info[key];
    return value === undefined || value === null ? undefined : String(value);
}

function onOutcome(context, kind) {
    const delivery = context.delivery;
    const lock = delivery._lock;
    const state = delivery.remote_state;
    if (lock && locks.has(lock.token)) {
        if (kind === 'accepted') settleLock(lock, 'complete');
        else if (kind === 'released') settleLock(lock, 'release');
        else if (kind === 'modified') {
            if (state && state.undeliverable_here) settleLock(lock, 'release'); // defer: not modelled
            else settleLock(lock, 'abandon');
        } else if (kind === 'rejected') {
            const error = (state && state.error) || {};
            settleLock(lock, 'dead-letter', {
                reason: infoValue(error.info, 'DeadLetterReason') || error.condition,
                description: infoValue(error.info, 'DeadLetterErrorDescription') || error.description,
            });
        }
    }
    // Echo the outcome, settled (the receiver attached with rcv-settle-mode "second").
    if (!delivery.settled) delivery.update(true, echo(kind, state));
}

function echo(kind, state) {
    if (kind === 'accepted') return amqpMessage.accepted().described();
    if (kind === 'released') return amqpMessage.released().described();
    // A rejected echo must not carry an error: the SDK reads an error as "settlement refused".
    if (kind === 'rejected') return amqpMessage.rejected({}).described();
    return amqpMessage
        .modified({
            delivery_failed: state && state.delivery_failed,
            undeliverable_here: state && state.undeliverable_here,
        })
        .described();
}

function releaseLocksOf(predicate) {
    for (const lock of Array.from(locks.values())) {
        if (predicate(lock)) settleLock(lock, 'abandon');
    }
}

// ---- request/response links ($cbs, $management) -----------------------------------------------------

function replyLink(connection, address) {
    for (const sender of connection._doubleRequestReplies || []) {
        if (entityOf(sender.remote.attach.source && sender.remote.attach.source.address) === address) {
            return sender;
        }
    }
    return undefined;
}

function reply(connection, address, request, applicationProperties, body) {
    const sender = replyLink(connection, address);
    if (!sender) {
        log('no reply link for', address);
        return;
    }
    const response = { correlation_id: request.message_id, application_properties: applicationProperties };
    if (body !== undefined) response.body = body;
    sender.send(response);
}

function handleCbs(connection, request) {
    const props = request.application_properties || {};
    log('cbs', props.operation, props.name);
    reply(connection, CBS, request, { 'status-code': 202, 'status-description': 'Accepted' });
}

function lockTokens(body) {
    const tokens = (body && body['lock-tokens']) || [];
    return (Array.isArray(tokens) ? tokens : [tokens]).map(tagHexFromUuid);
}

function handleManagement(connection, address, request) {
    const props = request.application_properties || {};
    const operation = props.operation;
    const body = request.body || {};
    log('management', address, operation);
    const fail = (code, condition, description) =>
        reply(connection, address, request, {
            statusCode: code,
            statusDescription: description,
            errorCondition: condition,
        });
    if (operation === 'com.microsoft:renew-lock') {
        const expirations = [];
        for (const token of lockTokens(body)) {
            const lock = locks.get(token);
            if (!lock) {
                return fail(410, 'com.microsoft:message-lock-lost', 'The lock supplied is invalid.');
            }
            lock.lockedUntil = new Date(Date.now() + options.lockDurationSeconds * 1000);
            expirations.push(lock.lockedUntil.getTime());
        }
        return reply(connection, address, request, { statusCode: 200, statusDescription: 'OK' }, {
            expirations: types.wrap_array(expirations, 0x83), // array of timestamps
        });
    }
    if (operation === 'com.microsoft:update-disposition') {
        const status = body['disposition-status'];
        const outcome = { completed: 'complete', abandoned: 'abandon', suspended: 'dead-letter' }[status];
        if (!outcome) return fail(501, 'amqp:not-implemented', 'disposition ' + status + ' is not modelled');
        for (const token of lockTokens(body)) {
            const lock = locks.get(token);
            if (!lock) return fail(410, 'com.microsoft:message-lock-lost', 'The lock supplied is invalid.');
            settleLock(lock, outcome, {
                reason: body['deadletter-reason'],
                description: body['deadletter-description'],
            });
        }
        return reply(connection, address, request, { statusCode: 200, statusDescription: 'OK' });
    }
    return fail(501, 'amqp:not-implemented', 'operation ' + operation + ' is not modelled by the test double');
}

// ---- incoming messages ------------------------------------------------------------------------------

function splitBatch(buffer) {
    const outer = amqpMessage.decode(buffer);
    const section = outer.body;
    const parts = section && section.multiple ? section.content : section ? [section.content] : [];
    return parts.map((part) => amqpMessage.decode(part));
}

function onMessage(context) {
    const receiver = context.receiver;
    const address = entityOf(receiver.remote.attach.target && receiver.remote.attach.target.address);
    const messages = context.format === BATCH_FORMAT ? splitBatch(context.message) : [context.message];
    if (address === CBS) {
        handleCbs(context.connection, messages[0]);
    } else if (address.endsWith(MANAGEMENT_SUFFIX)) {
        handleManagement(context.connection, address, messages[0]);
    } else {
        for (const msg of messages) enqueue(address, msg);
    }
    context.delivery.update(true, amqpMessage.accepted().described());
}

// ---- links ---------------------------------------------------------------------------------------

function answerAttach(link) {
    const remote = link.remote.attach;
    link.set_source(remote.source || {});
    link.set_target(remote.target || {});
    link.local.attach.snd_settle_mode = remote.snd_settle_mode;
    link.local.attach.rcv_settle_mode = remote.rcv_settle_mode;
}

const container = rhea.create_container({ id: 'servicebus-amqp-test-double' });

// Answer the attach, then detach with an error when the control channel asked for a refusal.
function refused(link, address, receiving) {
    const refusal = refusals.get(address);
    if (refusal === 'missing' || (refusal === 'refuse-receive' && receiving)) {
        const condition = refusal === 'missing' ? 'amqp:not-found' : 'amqp:unauthorized-access';
        link.close({ condition, description: `${refusal}: ${address} (test double)` });
        return true;
    }
    return false;
}

container.on('receiver_open', (context) => {
    // The client attached a sender: it will send to us.
    answerAttach(context.receiver); // rhea's default credit window keeps the client supplied
    if (refused(context.receiver, entityOf(context.receiver.remote.attach.target.address), false)) return;
    log('client sender attached to', context.receiver.remote.attach.target.address);
});

container.on('sender_open', (context) => {
    // The client attached a receiver: a queue consumer, or the reply side of $cbs / $management.
    const sender = context.sender;
    answerAttach(sender);
    const address = entityOf(sender.remote.attach.source && sender.remote.attach.source.address);
    if (refused(sender, address, true)) return;
    if (address === CBS || address.endsWith(MANAGEMENT_SUFFIX)) {
        const connection = context.connection;
        connection._doubleRequestReplies = connection._doubleRequestReplies || [];
        connection._doubleRequestReplies.push(sender);
    } else {
        sender._doubleEntity = address;
        queueFor(address).senders.add(sender);
    }
    log('client receiver attached to', address, 'rcv_settle_mode', sender.remote.attach.rcv_settle_mode);
});

container.on('sendable', (context) => {
    if (context.sender._doubleEntity !== undefined) deliverAvailable(context.sender._doubleEntity);
});

container.on('sender_draining', (context) => {
    const sender = context.sender;
    if (sender._doubleEntity === undefined) return;
    sender._draining_requested = true;
    deliverAvailable(sender._doubleEntity);
});

container.on('message', onMessage);
for (const kind of ['accepted', 'released', 'modified', 'rejected']) {
    container.on(kind, (context) => onOutcome(context, kind));
}

function forgetSender(sender) {
    if (sender._doubleEntity === undefined) return;
    queueFor(sender._doubleEntity).senders.delete(sender);
    releaseLocksOf((lock) => lock.sender === sender);
}

container.on('sender_close', (context) => forgetSender(context.sender));
container.on('connection_close', (context) => releaseLocksOf((lock) => lock.sender.connection === context.connection));
container.on('disconnected', (context) => releaseLocksOf((lock) => lock.sender.connection === context.connection));
container.on('error', (error) => log('error', error && error.message));

const server = container.listen({
    host: options.host,
    port: options.port,
    treat_modified_as_released: false,
    autoaccept: false,
    tcp_no_delay: true, // without it every request/response waits out delayed ACKs (about 50 ms each)
});
server.on('listening', () => {
    process.stdout.write('LISTENING ' + server.address().port + '\n');
});
server.on('error', (error) => {
    console.error('[amqp-test-double] cannot listen:', error.message);
    process.exit(2);
});

// ---- control channel: one command per stdin line, one JSON line back on stdout ------------------
//   state     -> {"queues": {"<entity>": {"available": n, "locked": n}}}   (what a broker would hold)
//   refuse-receive <entity> | missing <entity>   -> {"ok": true}   (the refusals above, from now on)

function state() {
    const result = {};
    for (const [entity, queue] of queues) result[entity] = { available: queue.messages.length, locked: 0 };
    for (const lock of locks.values()) {
        result[lock.entity] = result[lock.entity] || { available: 0, locked: 0 };
        result[lock.entity].locked += 1;
    }
    return { queues: result };
}

let pendingInput = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
    pendingInput += chunk;
    let newline;
    while ((newline = pendingInput.indexOf('\n')) >= 0) {
        const command = pendingInput.slice(0, newline).trim();
        pendingInput = pendingInput.slice(newline + 1);
        const [verb, entity] = command.split(/\s+/);
        let answer = { error: 'unknown command ' + command };
        if (command === 'state') answer = state();
        else if ((verb === 'refuse-receive' || verb === 'missing') && entity) {
            refusals.set(entity, verb);
            answer = { ok: true };
        }
        process.stdout.write(JSON.stringify(answer) + '\n');
    }
});

function shutdown() {
    server.close();
    process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
process.stdin.on('end', shutdown); // the test process went away: do not linger
