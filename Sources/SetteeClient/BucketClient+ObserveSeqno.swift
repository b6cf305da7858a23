import NIOCore
import SetteeCore
import SetteeProtocol

/// OBSERVE_SEQNO (0x91) on a vBucket's active node: how far that copy has persisted, under which history (uuid).
public struct ObservedSeqno: Sendable, Equatable {
    public var vbucket: VBucketID
    /// The vBucket's current uuid on the node that answered.
    public var uuid: VBucketUUID
    public var persistedSeqno: SeqNo
    public var currentSeqno: SeqNo
    /// The node answered in format 1: the uuid asked about is not its current one (the vBucket failed over).
    public var failedOver: Bool

    public init(vbucket: VBucketID, uuid: VBucketUUID, persistedSeqno: SeqNo, currentSeqno: SeqNo, failedOver: Bool) {
        self.vbucket = vbucket
        self.uuid = uuid
        self.persistedSeqno = persistedSeqno
        self.currentSeqno = currentSeqno
        self.failedOver = failedOver
    }

    /// Decodes the reply's value (`ObserveSeqnoReply`); nil when it is too short or of another format.
    public static func decode(_ value: ByteBuffer) -> ObservedSeqno? {
        guard let reply = ObserveSeqnoReply(decoding: value) else { return nil }
        return ObservedSeqno(
            vbucket: VBucketID(reply.vbucket), uuid: VBucketUUID(reply.uuid),
            persistedSeqno: SeqNo(reply.persistedSeqno),
            currentSeqno: SeqNo(reply.currentSeqno), failedOver: reply.failedOver != nil)
    }
}

extension BucketClient {
    /// The KV addresses of `vbucket`'s chain in the current map, `[active, replica...]` (`replicaNumber + 1`
    /// entries), nil where the map names no node; nil without a map or for a vBucket outside it.
    public func chainAddresses(of vbucket: VBucketID) -> [NodeAddress?]? {
        guard let config = currentConfig, vbucket.index < config.chains.count else { return nil }
        return config.chains[vbucket.index].map { n in
            n >= 0 && Int(n) < config.nodes.count ? config.nodes[Int(n)].kv : nil
        }
    }

    /// OBSERVE_SEQNO on one node, whichever copy of `vbucket` it holds (an active or a replica answers; a node
    /// without the vBucket answers NOT_MY_VBUCKET, thrown as its `ClientError`). One attempt, no retry.
    public func observeSeqno(
        _ vbucket: VBucketID, uuid: VBucketUUID, on node: NodeAddress, timeoutMs: Int
    ) async throws -> ObservedSeqno {
        var value = ByteBuffer()
        value.writeInteger(uuid.rawValue)
        let r = try await send(
            RequestFrame(opcode: .observeSeqno, vbucket: vbucket.rawValue, value: value), to: node,
            timeoutMs: timeoutMs)
        if let e = ClientError.from(status: r.status, opcode: .observeSeqno, message: String(buffer: r.value)) {
            throw e
        }
        guard let observed = ObservedSeqno.decode(r.value), observed.vbucket == vbucket else {
            throw ClientError.server(
                status: r.status.rawValue, message: "undecodable OBSERVE_SEQNO reply for vb \(vbucket.rawValue)")
        }
        return observed
    }
}
