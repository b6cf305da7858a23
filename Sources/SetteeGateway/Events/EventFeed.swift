import SetteeCore
import Synchronization

/// The changed documents of a database, in the order they were indexed, handed to its webhooks by one task, so
/// the lanes receive a document's changes in order. Bounded: beyond `Limits.webhookQueueCapacity` changes not
/// yet handed over, new ones are dropped and counted (the handlers' own queues are bounded the same way).
final class EventFeed: Sendable {
    private let continuation: AsyncStream<(String, [UInt8])>.Continuation?
    private let armed = Atomic<Bool>(false)
    private let dropped = Atomic<Int>(0)
    private let task: Task<Void, Never>?

    init(events: GatewayEvents?) {
        guard let events else {
            continuation = nil
            task = nil
            return
        }
        let (stream, c) = AsyncStream<(String, [UInt8])>.makeStream(
            bufferingPolicy: .bufferingOldest(Limits.webhookQueueCapacity))
        continuation = c
        task = Task {
            for await (id, body) in stream { await events.documentChanged(id: id, body: body) }
            events.shutdown()
        }
    }

    /// Whether changes are passed on (a database with handlers, once open).
    var isArmed: Bool { armed.load(ordering: .relaxed) }

    func arm() { if continuation != nil { armed.store(true, ordering: .relaxed) } }

    /// Changes dropped because the feed was full.
    var droppedCount: Int { dropped.load(ordering: .relaxed) }

    func documentChanged(id: String, body: [UInt8]) {
        guard let continuation else { return }
        if body.count > Limits.webhookMaxBodyBytes {
            dropped.wrappingAdd(1, ordering: .relaxed)
            return
        }
        if case .dropped = continuation.yield((id, body)) { dropped.wrappingAdd(1, ordering: .relaxed) }
    }

    func close() {
        armed.store(false, ordering: .relaxed)
        continuation?.finish()
    }
}
