import Foundation
import NIOCore
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Testing

@testable import SetteeNode

/// SET_WITH_META / ADD_WITH_META / DEL_WITH_META through the KV handler in-process (ADR 0147): the stored version
/// carries the request's CAS and revSeqno, hostile extras lengths are EINVAL, conflict losses KEY_EEXISTS, and the
/// opcodes need write and manage on the bucket.
@Suite(.serialized) struct KVWithMetaTests {
    typealias Fixture = KVHandlerChannelTests.Fixture

    static func extras(cas: UInt64, rev: UInt64, options: UInt32 = 0) -> [UInt8] {
        var b = ByteBuffer()
        WithMetaRequest(flags: 3, expiry: 0, revSeqno: rev, cas: cas, options: WithMetaOptions(rawValue: options))
            .encode(into: &b)
        return Array(b.readableBytesView)
    }

    static func meta(_ f: Fixture, _ key: String) throws -> ItemMetadata {
        let engine = try #require(f.registry.bucket(named: bucketName))
        let k = Array(key.utf8)
        return try engine.getMeta(VBucketHash.vbucket(forKey: k, count: 4), k)
    }

    @Test func keepsTheGivenCASAndRefusesWhatItMust() async throws {
        let f = try await Fixture(open: true)
        let cas: UInt64 = 0x1234_5678_0000_0000
        let set = try await KVJSONDatatypeTests.send(
            f, .setWithMeta, key: "a", value: Array("{}".utf8), extras: Self.extras(cas: cas, rev: 10))
        #expect(set.status == .success && set.cas == cas)
        let stored = try Self.meta(f, "a")
        #expect(
            stored.cas == CAS(cas) && stored.revSeqno == RevSeqNo(10) && stored.flags == 3 && stored.datatype == .json)
        // Lower revSeqno loses; ADD on a live document is refused; SKIP wins.
        let lose = try await KVJSONDatatypeTests.send(
            f, .setWithMeta, key: "a", value: Array("1".utf8), extras: Self.extras(cas: cas + 1, rev: 9))
        #expect(lose.status == .keyExists)
        let add = try await KVJSONDatatypeTests.send(
            f, .addWithMeta, key: "a", value: Array("1".utf8), extras: Self.extras(cas: cas + 1, rev: 99))
        #expect(add.status == .keyExists)
        let skip = try await KVJSONDatatypeTests.send(
            f, .setWithMeta, key: "a", value: Array("1".utf8), extras: Self.extras(cas: 7 << 16, rev: 1, options: 0x08))
        let skipped = try Self.meta(f, "a")
        #expect(skip.status == .success && skipped.cas == CAS(7 << 16))
        let del = try await KVJSONDatatypeTests.send(
            f, .delWithMeta, key: "a", extras: Self.extras(cas: cas + 5, rev: 2))
        #expect(del.status == .success)
        let tomb = try Self.meta(f, "a")
        #expect(tomb.deleted && tomb.cas == CAS(cas + 5))
        // Hostile extras: every other length, an unknown option, a zero CAS.
        for n in [0, 8, 23, 25, 27, 29, 31, 64] {
            let r = try await KVJSONDatatypeTests.send(
                f, .setWithMeta, key: "h", value: [1], extras: [UInt8](repeating: 0xff, count: n))
            #expect(r.status == .invalidArguments, "extras \(n)")
        }
        let unknown = try await KVJSONDatatypeTests.send(
            f, .setWithMeta, key: "h", value: [1], extras: Self.extras(cas: cas, rev: 1, options: 0x40))
        #expect(unknown.status == .invalidArguments)
        let zero = try await KVJSONDatatypeTests.send(
            f, .setWithMeta, key: "h", value: [1], extras: Self.extras(cas: 0, rev: 1))
        #expect(zero.status == .invalidArguments)
        await f.finish()
    }

    @Test func needsWriteAndManage() {
        let needed = KVConnectionHandler.grantsNeeded(.setWithMeta)
        #expect(needed == [.write, .manage] && KVConnectionHandler.grantsNeeded(.delWithMeta) == needed)
        #expect(KVConnectionHandler.grantsNeeded(.addWithMeta) == needed)
        #expect(!BucketGrants([.readConfig, .write]).isSuperset(of: needed))  // data_writer
        #expect(BucketGrants.all.isSuperset(of: needed))
    }
}
