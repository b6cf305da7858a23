import Logging
import NIOCore
import NIOPosix
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization

extension KVConnectionHandler {
    /// FLUSH / FLUSHQ: empties the bucket (on every node of a cluster). Blocking: runs on the node's thread pool
    /// or as a task, answered in order.
    func flush(_ frame: Frame) {
        guard case .ok(let bucket) = currentBucket() else {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .noBucket, opaque: frame.opaque) }
            return
        }
        let settings = bucket.settings
        guard authorizeBucketWide(frame, bucket: settings.name) else { return }
        // Without credentials a connection has only what `BucketGrants.anonymous` gives (ADR 0015): never flush.
        if state.principal == nil,
            !BucketGrants.anonymous(bucketHasNoPassword: settings.authType == .none).contains(.manage)
        {
            emit {
                $0.writeResponse(
                    opcode: frame.opcode, status: .accessDenied, opaque: frame.opaque, value: Array("No access".utf8))
            }
            return
        }
        if !RequestShape.accepts(frame, maxKeyLength: Limits.maxKeyLength) {
            emit { $0.writeResponseHeader(opcode: frame.opcode, status: .invalidArguments, opaque: frame.opaque) }
            return
        }
        let slot = reserveSlot()
        let loop = context!.eventLoop
        let registry = node.registry
        let name = settings.name
        let quiet = frame.opcode.isQuiet
        let opcode = frame.opcode
        let opaque = frame.opaque
        let logger = self.logger
        let handler = NIOLoopBound(self, eventLoop: loop)
        let answer: @Sendable (Status, String?) -> Void = { status, why in
            loop.execute {
                var b = ByteBuffer()
                if let why {
                    b.writeResponse(opcode: opcode, status: status, opaque: opaque, value: Array(why.utf8))
                } else if !(quiet && status == .success) {
                    b.writeResponseHeader(opcode: opcode, status: status, opaque: opaque)
                }
                handler.value.complete(slot, b)
            }
        }
        // On a cluster the flush empties the bucket on every node, as REST doFlush does (never one node's share).
        if let clusterFlush = node.bucketFlush {
            Task {
                switch await clusterFlush(name) {
                case .flushed: answer(.success, nil)
                case .notFound: answer(.noBucket, nil)
                case .disabled: answer(.notSupported, "Flush is disabled for the bucket")
                case .rebalanceRunning: answer(.temporaryFailure, "Rebalance running. Cannot flush the bucket.")
                case .failed(let why):
                    logger.notice("flush failed", metadata: ["bucket": "\(name)", "error": "\(why)"])
                    answer(.internalError, "Flush failed on some nodes: \(why)")
                }
            }
            return
        }
        node.blockingPool.submit { _ in
            do {
                try registry.flushBucket(named: name)
                answer(.success, nil)
            } catch {
                logger.notice("flush refused", metadata: ["bucket": "\(name)", "error": "\(error)"])
                answer(settings.flushEnabled ? .internalError : .notSupported, nil)
            }
        }
    }
}
