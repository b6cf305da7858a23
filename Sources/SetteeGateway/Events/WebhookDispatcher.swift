import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SetteeCore
import SetteeJS
import SetteeJSON
import Synchronization

/// A database's `document_changed` event handlers (Sync Gateway's webhooks): each change of a document is
/// offered to every handler, whose lanes post it (after the optional JavaScript filter) to the handler's URL.
public final class GatewayEvents: Sendable {
    let handlers: [WebhookHandler]

    public init(config: EventHandlersConfig, logger: Logger) throws(ConfigError) {
        var hs: [WebhookHandler] = []
        for (i, hook) in config.documentChanged.enumerated() {
            do { hs.append(try WebhookHandler(hook, index: i, config: config, logger: logger)) } catch {
                // The handlers made so far own threads (their filters) and HTTP clients: stopped, not leaked.
                for h in hs { h.shutdown() }
                throw error
            }
        }
        handlers = hs
    }

    /// A document changed: `body` is the new revision as a client reads it (`_id`, `_rev`, members,
    /// `_deleted`). Waits at most `wait_for_process` per handler for room in a full queue.
    func documentChanged(id: String, body: [UInt8]) async {
        for h in handlers { await h.offer(WebhookEvent(docID: id, body: body)) }
    }

    /// `event_handlers` counters for `/_expvar`, summed over the handlers.
    public func stats() -> JSON {
        var total = WebhookHandler.Counters()
        for h in handlers { total.add(h.counters()) }
        return total.json(handlers: handlers.count)
    }

    public func shutdown() {
        for h in handlers { h.shutdown() }
    }
}

struct WebhookEvent: Sendable {
    var docID: String
    var body: [UInt8]
}

/// One webhook: a bounded queue split in lanes (one worker task per lane, events of a document in one lane),
/// the filter's JavaScript thread, and the HTTP client.
final class WebhookHandler: Sendable {
    struct Counters: Sendable {
        var queued = 0
        var posted = 0
        var failed = 0
        var dropped = 0
        var filteredOut = 0
        var retries = 0
        var pending = 0

        mutating func add(_ o: Counters) {
            queued &+= o.queued
            posted &+= o.posted
            failed &+= o.failed
            dropped &+= o.dropped
            filteredOut &+= o.filteredOut
            retries &+= o.retries
            pending &+= o.pending
        }

        func json(handlers: Int) -> JSON {
            .object([
                ("handlers", .integer(Int128(handlers))), ("events_queued", .integer(Int128(queued))),
                ("events_pending", .integer(Int128(pending))), ("webhooks_posted", .integer(Int128(posted))),
                ("webhooks_failed", .integer(Int128(failed))), ("webhooks_retried", .integer(Int128(retries))),
                ("events_dropped", .integer(Int128(dropped))), ("events_filtered_out", .integer(Int128(filteredOut))),
            ])
        }
    }

    private struct State {
        var queue: WebhookQueue<WebhookEvent>
        /// A lane's worker waiting for an event.
        var idle: [Int: CheckedContinuation<WebhookEvent?, Never>] = [:]
        /// Writers waiting for room, oldest first.
        var roomWaiters: [(id: UInt64, c: CheckedContinuation<Bool, Never>)] = []
        var nextWaiter: UInt64 = 0
        var stopped = false
        var counters = Counters()
    }

    let url: String
    let timeout: TimeAmount
    let waitForProcessMs: Int
    let laneCount: Int
    private let state: Mutex<State>
    private let filter: JavaScriptPredicate?
    private let http: HTTPClient
    private let logger: Logger
    private let workers = Mutex<[Task<Void, Never>]>([])

    init(_ hook: EventHandlersConfig.Webhook, index: Int, config: EventHandlersConfig, logger: Logger)
        throws(ConfigError)
    {
        url = hook.url
        timeout = .seconds(Int64(hook.timeoutSeconds))
        waitForProcessMs = config.waitForProcessMs
        laneCount = WebhookPolicy.lanes(maxProcesses: config.maxProcesses)
        state = Mutex(State(queue: WebhookQueue(lanes: laneCount, capacity: Limits.webhookQueueCapacity)))
        if let source = hook.filter {
            do { filter = try JavaScriptPredicate(source: source, threadName: "settee.webhook-filter") } catch {
                throw ConfigError(path: "event_handlers.document_changed[\(index)].filter", message: "\(error)")
            }
        } else {
            filter = nil
        }
        http = HTTPClient(eventLoopGroupProvider: .singleton)
        self.logger = logger
        var tasks: [Task<Void, Never>] = []
        for lane in 0..<laneCount {
            tasks.append(Task { [self] in await self.work(lane: lane) })
        }
        workers.withLock { $0 = tasks }
    }

    func counters() -> Counters {
        state.withLock { s in
            var c = s.counters
            c.pending = s.queue.count
            return c
        }
    }

    /// Queues `event` in its document's lane; when the queue is full, waits up to `wait_for_process` for room,
    /// then drops it (counted in `events_dropped`).
    func offer(_ event: WebhookEvent) async {
        let lane = WebhookPolicy.lane(of: event.docID, lanes: laneCount)
        if tryOffer(event, lane: lane) { return }
        if waitForProcessMs > 0 {
            let id = state.withLock { s -> UInt64 in
                s.nextWaiter &+= 1
                return s.nextWaiter
            }
            let timer = Task { [self] in
                try? await Task.sleep(for: .milliseconds(waitForProcessMs))
                self.resumeWaiter(id, false)
            }
            let room = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                let now = state.withLock { s -> Bool? in
                    if s.stopped { return false }
                    if s.queue.count < s.queue.capacity { return true }
                    s.roomWaiters.append((id, c))
                    return nil
                }
                if let now { c.resume(returning: now) }
            }
            timer.cancel()
            if room, tryOffer(event, lane: lane) { return }
        }
        state.withLock { $0.counters.dropped &+= 1 }
        logger.warning("webhook queue full: event dropped", metadata: ["url": "\(url)"])
    }

    private func resumeWaiter(_ id: UInt64, _ room: Bool) {
        let c = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard let i = s.roomWaiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.roomWaiters.remove(at: i).c
        }
        c?.resume(returning: room)
    }

    private func tryOffer(_ event: WebhookEvent, lane: Int) -> Bool {
        let (accepted, worker) = state.withLock { s -> (Bool, CheckedContinuation<WebhookEvent?, Never>?) in
            if s.stopped { return (true, nil) }
            if let w = s.idle.removeValue(forKey: lane) {
                s.counters.queued &+= 1
                return (true, w)
            }
            guard s.queue.offer(event, lane: lane) else { return (false, nil) }
            s.counters.queued &+= 1
            return (true, nil)
        }
        worker?.resume(returning: event)
        return accepted
    }

    private func next(lane: Int) async -> WebhookEvent? {
        await withCheckedContinuation { (c: CheckedContinuation<WebhookEvent?, Never>) in
            let (now, room) = state.withLock { s -> (WebhookEvent??, CheckedContinuation<Bool, Never>?) in
                if s.stopped { return (.some(nil), nil) }
                if let e = s.queue.take(lane: lane) {
                    let waiter = s.roomWaiters.isEmpty ? nil : s.roomWaiters.removeFirst().c
                    return (.some(e), waiter)
                }
                s.idle[lane] = c
                return (nil, nil)
            }
            room?.resume(returning: true)
            if let now { c.resume(returning: now) }
        }
    }

    private func work(lane: Int) async {
        while let event = await next(lane: lane) {
            if let filter, !(await filter.accepts(event.body)) {
                state.withLock { $0.counters.filteredOut &+= 1 }
                continue
            }
            await deliver(event)
        }
    }

    private func deliver(_ event: WebhookEvent) async {
        var attempt = 1
        while true {
            let outcome = await post(event.body)
            switch WebhookPolicy.next(after: outcome, attempt: attempt) {
            case .delivered:
                state.withLock { $0.counters.posted &+= 1 }
                return
            case .giveUp:
                state.withLock { $0.counters.failed &+= 1 }
                logger.warning(
                    "webhook failed", metadata: ["url": "\(url)", "outcome": "\(outcome)", "attempts": "\(attempt)"])
                return
            case .retry(let ms):
                state.withLock { $0.counters.retries &+= 1 }
                try? await Task.sleep(for: .milliseconds(ms))
                if state.withLock({ $0.stopped }) { return }
                attempt += 1
            }
        }
    }

    private func post(_ body: [UInt8]) async -> WebhookPolicy.Outcome {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await http.execute(request, timeout: timeout)
            // The answer's body is not used; read (bounded) so the connection can be reused.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return .status(Int(response.status.code))
        } catch {
            return .noAnswer
        }
    }

    func shutdown() {
        let (idle, rooms) = state.withLock { s in
            s.stopped = true
            let i = Array(s.idle.values)
            let r = s.roomWaiters.map(\.c)
            s.idle = [:]
            s.roomWaiters = []
            return (i, r)
        }
        for c in idle { c.resume(returning: nil) }
        for c in rooms { c.resume(returning: false) }
        filter?.shutdown()
        let client = http
        Task { try? await client.shutdown() }
    }
}
