import Foundation
import NIOPosix

extension ReloadableTLSIdentity {
    /// `reload(now:)` on NIO's blocking thread pool (two file reads and a context build), for callers on an event
    /// loop or the cooperative pool: the gateway's admin endpoint and SIGHUP, Lite's listener (ADR 0040).
    @discardableResult
    public func reloadOffLoop(now: Date = Date()) async throws -> TLSIdentity {
        try await NIOThreadPool.singleton.runIfActive { try self.reload(now: now) }
    }
}
