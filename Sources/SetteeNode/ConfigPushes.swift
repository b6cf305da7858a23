import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

/// Server-pushed cluster maps (kv_engine's ClustermapChangeNotification, server request 0x82/0x01) for
/// connections that agreed both Duplex (0x0c) and ClustermapChangeNotification (0x0d) in HELLO.
///
/// A registry config change (the observer runs on the mutating thread) hops to each subscribed connection's
/// event loop; the handler then pushes its selected bucket's config (or the global config when no bucket is
/// selected and every config changed). Clients apply a pushed config only if it is newer, so an extra push
/// is harmless; a missed one is covered by NOT_MY_VBUCKET bodies and the SDK's polling.
final class ConfigPushes: Sendable {
    private struct Subscriber: @unchecked Sendable {
        // Only touched on `loop` (NIOLoopBound checks it).
        let handler: NIOLoopBound<KVConnectionHandler>
        let loop: any EventLoop
    }
    private let subscribers = Mutex<[ObjectIdentifier: Subscriber]>([:])

    func subscribe(_ handler: KVConnectionHandler, loop: any EventLoop) {
        let entry = Subscriber(handler: NIOLoopBound(handler, eventLoop: loop), loop: loop)
        subscribers.withLock { $0[ObjectIdentifier(handler)] = entry }
    }

    func unsubscribe(_ id: ObjectIdentifier) {
        _ = subscribers.withLock { $0.removeValue(forKey: id) }
    }

    /// `changed`: the bucket whose config changed, or nil for every config.
    func publish(changed: String?) {
        for s in subscribers.withLock({ Array($0.values) }) {
            s.loop.execute { s.handler.value.pushConfig(changed: changed) }
        }
    }
}

extension KVConnectionHandler {
    func subscribeToConfigPushes() {
        guard let context else { return }
        node.configPushes.subscribe(self, loop: context.eventLoop)
    }

    /// Pushes the config this connection follows, if `changed` concerns it.
    func pushConfig(changed: String?) {
        guard let context, !closing else { return }
        let bucket = state.selectedBucket
        if let changed, changed != bucket { return }
        let body: [UInt8]?
        let revision: MapRevision?
        if let bucket {
            body = node.registry.terseConfigJSON(bucket: bucket)
            revision = node.registry.configRevision(bucket: bucket)
        } else {
            body = node.registry.globalConfigJSON()
            revision = node.registry.globalConfigRevision
        }
        guard let body, let revision else { return }
        var extras: [UInt8] = []
        extras.reserveCapacity(16)
        withUnsafeBytes(of: revision.epoch.bigEndian) { extras += $0 }
        withUnsafeBytes(of: revision.rev.bigEndian) { extras += $0 }
        out.writeServerRequest(
            opcode: .clustermapChangeNotification, datatype: Datatype.json.rawValue, extras: extras,
            key: Array((bucket ?? "").utf8), value: body)
        flushOut(context: context)
    }
}
