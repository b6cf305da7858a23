import Logging
import NIOCore
import SetteeCore
import SetteeProtocol

/// One routed operation of a `BucketClient`: attempts on the node the current map names, failures judged
/// by `RetryPolicy`, retries. Driven only by NIO future callbacks and event-loop timers, never by a
/// suspended task.
///
/// Why not an `async` loop: each step of such a loop (connection ready → write → reply → retry) resumes
/// on the cooperative thread pool. When that pool is starved (two cores, tests or handlers blocking its
/// threads for seconds), a request resumed after its deadline was written too late and failed `timeout`
/// although the node would have answered at once: the gateway's 503 "get timed out after 10000 ms" during a
/// rebalance, with nothing wrong in the nodes' logs. Here a reply that arrives before the deadline always
/// completes the operation; only the caller's own resumption may be late.
///
/// ```
///   start ──▶ attempt ──(ready connection)──────────────▶ sent ──reply──▶ done
///                │ └─(opening: wait ≤ deadline)──▶ sent    │
///                │                                         └─NMVB / TMPFAIL / lost / not sent──▶ judged
///   judged ──fail──▶ done (error)
///   judged ──retry──▶ [refresh: wait for it ≤ refreshWaitMaxMs] ──▶ backoff timer ──▶ attempt
/// ```
/// Invariants:
/// 1. The future `start` returns is completed exactly once: with a response, a definite error, or `timeout`
///    by the deadline.
/// 2. One step at a time: every step is started by the completion of the one before (or by `start`), so
///    the mutable fields are never touched concurrently although callbacks run on different event loops.
/// 3. Every wait is bounded by the deadline: the send's timer, the connection wait, the refresh wait, the
///    backoff (`RetryPolicy` schedules no retry past it), and an attempt after the deadline is not made.
final class RoutedOperation: @unchecked Sendable {
    private let client: BucketClient
    private let loop: any EventLoop
    private let promise: EventLoopPromise<Frame>
    private var request: RequestFrame
    private let key: ByteBuffer
    private let operation: String
    private let kind: OperationKind
    private let began: NIODeadline
    private let deadline: NIODeadline
    private let timeoutMs: Int
    private var attemptNumber = 0

    private init(
        client: BucketClient, request: RequestFrame, key: ByteBuffer, operation: String, timeoutMs: Int,
        loop: any EventLoop
    ) {
        self.client = client
        self.loop = loop
        self.promise = loop.makePromise(of: Frame.self)
        self.request = request
        self.key = key
        self.operation = operation
        self.kind = OperationKind(request.opcode)
        self.began = .now()
        self.deadline = began + .milliseconds(Int64(timeoutMs))
        self.timeoutMs = timeoutMs
    }

    /// Starts an operation: routes it on the current map and makes the first attempt on the caller's
    /// thread, so a request for a node whose connection is ready is handed to that channel before this
    /// returns (the router's ordering rule). The operation's timers and callbacks then run on that
    /// connection's event loop (any loop of the group when there is none yet).
    static func start(
        client: BucketClient, request: RequestFrame, key: ByteBuffer, operation: String, timeoutMs: Int
    ) -> EventLoopFuture<Frame> {
        guard let route = client.route(key: key) else {
            return client.group.any().makeFailedFuture(ClientError.closed)
        }
        let op = RoutedOperation(
            client: client, request: request, key: key, operation: operation, timeoutMs: timeoutMs,
            loop: route.2?.channel.eventLoop ?? client.group.any())
        op.attempt(first: route)
        return op.promise.futureResult
    }

    /// One attempt on the current map (`first`: the route and ready connection `start` already looked up).
    private func attempt(first: (VBucketID, NodeAddress?, KVConnection?)? = nil) {
        let vb: VBucketID
        let target: NodeAddress?
        if let first {
            (vb, target) = (first.0, first.1)
        } else {
            guard let config = client.currentConfig else { return promise.fail(ClientError.closed) }
            (vb, target) = config.route(key: key.readableBytesView)
        }
        request.vbucket = vb.rawValue
        guard let target else { return failed(.notSent, target: nil) }
        if attemptNumber > 0 && NIODeadline.now() >= deadline {
            // Nothing was sent for this attempt: the outcome is definite even for a mutation.
            return promise.fail(ClientError.timeout(operation: operation, afterMs: timeoutMs))
        }
        if let conn = first?.2 ?? client.readyConnection(to: target) { return send(on: conn, target: target) }
        client.connectionFuture(to: target, deadline: deadline).whenComplete { result in
            switch result {
            case .success(let conn): self.send(on: conn, target: target)
            case .failure(let e as AttemptError): self.failed(e.failure, target: target)
            case .failure(let e): self.promise.fail(e)
            }
        }
    }

    private func send(on conn: KVConnection, target: NodeAddress) {
        conn.send(request, deadline: deadline) { result in
            switch result {
            case .success(let frame):
                if let failure = self.client.failure(of: frame, from: target) {
                    self.failed(failure, target: target)
                } else {
                    self.promise.succeed(frame)
                }
            case .failure(let e):
                self.failed((e as? AttemptError)?.failure ?? .connectionLostAfterSend, target: target)
            }
        }
    }

    private func failed(_ failure: AttemptFailure, target: NodeAddress?) {
        let now = NIODeadline.now()
        let elapsedMs = Int((now.uptimeNanoseconds - began.uptimeNanoseconds) / 1_000_000)
        switch client.options.retryPolicy.decide(
            operation: operation, kind: kind, failure: failure, attempt: attemptNumber, elapsedMs: elapsedMs,
            timeoutMs: timeoutMs)
        {
        case .fail(let error):
            if case .timeout = error, target == nil {
                return promise.fail(ClientError.noActiveNode(vbucket: request.vbucket))
            }
            promise.fail(error)
        case .retry(let delayMs, let refresh):
            client.logger.debug(
                "retrying",
                metadata: [
                    "op": "\(operation)", "failure": "\(failure)", "attempt": "\(attemptNumber)",
                    "node": "\(target.map { "\($0)" } ?? "-")", "vb": "\(request.vbucket)",
                ])
            attemptNumber += 1
            guard refresh else { return retry(afterMs: delayMs) }
            // Wait for the shared refresh, but not for long: a refresh that asks a slow admin port (seconds)
            // must not hold every retry; the map also arrives in NOT_MY_VBUCKET bodies and pushes.
            let remainingMs = deadline > now ? Int((deadline - now).nanoseconds / 1_000_000) : 0
            let waitMs = min(remainingMs, ClientLimits.refreshWaitMaxMs)
            let waited = loop.makePromise(of: Void.self)
            let timer = loop.scheduleTask(in: .milliseconds(Int64(waitMs))) { waited.succeed(()) }
            client.refreshFuture(avoiding: target, on: loop).whenComplete { _ in
                timer.cancel()
                waited.succeed(())
            }
            waited.futureResult.whenComplete { _ in self.retry(afterMs: delayMs) }
        }
    }

    private func retry(afterMs delayMs: Int) {
        if delayMs <= 0 {
            loop.execute { self.attempt() }
        } else {
            loop.scheduleTask(in: .milliseconds(Int64(delayMs))) { self.attempt() }
        }
    }
}
