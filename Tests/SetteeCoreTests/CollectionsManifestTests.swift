import Foundation
import SetteeCore
import Testing

/// `CollectionsManifest`'s edit rules (ns_server's: names, limits, ids from 8, uid bumps, default stays), its
/// lookups for GET_COLLECTION_ID / GET_SCOPE_ID, its JSON, and `CollectionKey`'s LEB128 prefix and engine keys.
@Suite struct CollectionsManifestTests {
    /// A new bucket has `_default._default` (id 0) only, at uid 0, in the JSON shape the SDKs parse.
    @Test func initialManifestIsTheDefaultCollection() {
        let m = CollectionsManifest.initial
        #expect(m.uid == 0 && m.collectionCount == 1)
        #expect(m.resolveCollection("_default._default") == .collection(scopeID: 0, collectionID: 0))
        #expect(m.resolveCollection(".") == .collection(scopeID: 0, collectionID: 0))
        #expect(
            String(decoding: m.json, as: UTF8.self)
                == #"{"uid":"0","scopes":[{"name":"_default","uid":"0","collections":"#
                + #"[{"name":"_default","uid":"0","maxTTL":0,"history":false}]}]}"#)
        #expect(String(decoding: m.unknownBody, as: UTF8.self) == #"{"manifest_uid":"0"}"#)
    }

    /// Scopes and collections get ids from 8, each from its own counter; every edit bumps the uid; the JSON shows
    /// ids and uid in hex.
    @Test func createsGetIDsFromEightAndBumpTheUID() throws {
        var m = CollectionsManifest.initial
        try m.createScope("s1")
        try m.createCollection("c1", inScope: "s1")
        try m.createCollection("c2", inScope: "s1", maxTTL: 60)
        #expect(m.uid == 3)
        #expect(m.resolveCollection("s1.c1") == .collection(scopeID: 8, collectionID: 8))
        #expect(m.resolveCollection("s1.c2") == .collection(scopeID: 8, collectionID: 9))
        #expect(m.resolveScope("s1") == .scope(8))
        #expect(m.resolveScope("s1.") == .scope(8))
        #expect(m.collection(id: 9)?.maxTTL == 60)
        #expect(m.collectionsByID().keys.sorted() == [0, 8, 9])
        for _ in 0..<8 { try m.createScope("x\(m.uid)") }
        #expect(m.uidHex == "b")
        let json = try JSONSerialization.jsonObject(with: Data(m.json)) as? [String: Any]
        #expect(json?["uid"] as? String == "b")
        let scopes = json?["scopes"] as? [[String: Any]]
        #expect(scopes?.count == 10)
        #expect(scopes?[1]["name"] as? String == "s1")
        let c2 = (scopes?[1]["collections"] as? [[String: Any]])?[1]
        #expect(c2?["uid"] as? String == "9" && c2?["maxTTL"] as? Int == 60)
    }

    /// A dropped collection's id is never handed out again, and lookups stop finding it.
    @Test func droppedIDsAreNotReused() throws {
        var m = CollectionsManifest.initial
        try m.createScope("s")
        try m.createCollection("c", inScope: "s")
        try m.dropCollection("c", inScope: "s")
        #expect(m.resolveCollection("s.c") == .unknownCollection)
        #expect(m.collection(id: 8) == nil)
        try m.createCollection("c", inScope: "s")
        #expect(m.resolveCollection("s.c") == .collection(scopeID: 8, collectionID: 9))
        try m.dropScope("s")
        #expect(m.resolveCollection("s.c") == .unknownScope)
        #expect(m.resolveScope("s") == .unknownScope)
        try m.createScope("s")
        #expect(m.resolveScope("s") == .scope(9))
        #expect(m.uid == 6)
    }

    /// Refused edits throw the reason and leave the manifest unchanged.
    @Test func refusedEditsChangeNothing() throws {
        var m = CollectionsManifest.initial
        try m.createScope("s")
        let before = m
        #expect(throws: CollectionsManifest.EditError.scopeExists("s")) { try m.createScope("s") }
        #expect(throws: CollectionsManifest.EditError.scopeNotFound("t")) { try m.createCollection("c", inScope: "t") }
        #expect(throws: CollectionsManifest.EditError.collectionNotFound(scope: "s", collection: "c")) {
            try m.dropCollection("c", inScope: "s")
        }
        #expect(throws: CollectionsManifest.EditError.cannotDropDefault) { try m.dropScope("_default") }
        #expect(throws: CollectionsManifest.EditError.cannotDropDefault) {
            try m.dropCollection("_default", inScope: "_default")
        }
        #expect(throws: CollectionsManifest.EditError.invalidMaxTTL) {
            try m.createCollection("c", inScope: "s", maxTTL: UInt32.max)
        }
        try m.createCollection("c", inScope: "s")
        #expect(throws: CollectionsManifest.EditError.collectionExists(scope: "s", collection: "c")) {
            try m.createCollection("c", inScope: "s")
        }
        #expect(m.uid == before.uid + 1)
    }

    /// ns_server's name rule: 1...251 of `A-Za-z0-9_-%`, not starting with `_` or `%`.
    @Test(arguments: [
        ("a", true), ("Tenant-1_x%", true), (String(repeating: "a", count: 251), true), ("", false),
        ("_system", false), ("%x", false), ("a.b", false), ("a b", false), ("é", false),
        (String(repeating: "a", count: 252), false),
    ])
    func nameRule(_ name: String, _ valid: Bool) {
        #expect(CollectionsManifest.isValidName(name) == valid)
    }

    /// The scope and collection counts are bounded by `Limits` (the default collection counts).
    @Test func collectionCountIsBounded() throws {
        var m = CollectionsManifest.initial
        try m.createScope("s")
        for i in 1..<Limits.maxCollectionsPerBucket { try m.createCollection("c\(i)", inScope: "s") }
        #expect(throws: CollectionsManifest.EditError.tooManyCollections) { try m.createCollection("x", inScope: "s") }
        #expect(m.collectionCount == Limits.maxCollectionsPerBucket)
    }

    /// The manifest survives the Codable round trip the bucket settings take to disk and through the cluster
    /// document; settings persisted before collections decode with none (the initial manifest).
    @Test func persistsWithTheBucketSettings() throws {
        var settings = BucketSettings(name: "b", uuid: String(repeating: "a", count: 32), ramQuotaMB: 100)
        var m = CollectionsManifest.initial
        try m.createScope("s")
        try m.createCollection("c", inScope: "s", maxTTL: 5)
        settings.collections = m
        let decoded = try JSONDecoder().decode(BucketSettings.self, from: JSONEncoder().encode(settings))
        #expect(decoded.collectionsManifest == m)
        settings.collections = nil
        let old = try JSONDecoder().decode(BucketSettings.self, from: JSONEncoder().encode(settings))
        #expect(old.collectionsManifest == .initial)
    }

    /// LEB128 as kv_engine's examples: 0 → 00, 8 → 08, 555 → ab 04; malformed prefixes are refused, not trapped on.
    @Test func leb128Prefix() {
        #expect(CollectionKey.encodePrefix(0) == [0x00])
        #expect(CollectionKey.encodePrefix(8) == [0x08])
        #expect(CollectionKey.encodePrefix(555) == [0xab, 0x04])
        #expect(CollectionKey.encodePrefix(UInt32.max) == [0xff, 0xff, 0xff, 0xff, 0x0f])
        #expect(CollectionKey.decodePrefix([0xab, 0x04, 0x61]).map { [$0.id, UInt32($0.length)] } == [555, 2])
        #expect(CollectionKey.decodePrefix([0xff, 0xff, 0xff, 0xff, 0x1f]) == nil)
        #expect(CollectionKey.decodePrefix([0x80, 0x80, 0x80, 0x80, 0x80, 0x00]) == nil)
        #expect(CollectionKey.decodePrefix([UInt8]()) == nil)
        #expect(CollectionKey.decodePrefix([0x80]) == nil)
    }

    /// A named collection's engine key starts with the marker (never in UTF-8) and splits back; a default key is
    /// itself. The longest logical key keeps the engine key within `Limits.maxKeyLength`.
    @Test func engineKeys() {
        let key = CollectionKey.engineKey(collection: 555, logicalKey: Array("doc".utf8))
        #expect(key == [0xff, 0xab, 0x04, 0x64, 0x6f, 0x63])
        #expect(
            CollectionKey.split(engineKey: key).map { [$0.collection] + $0.logicalKey.map(UInt32.init) } == [
                555, 0x64, 0x6f, 0x63,
            ])
        #expect(CollectionKey.split(engineKey: Array("doc".utf8))?.collection == 0)
        // A default key starting with the marker is escaped behind the default's prefix and splits back to itself.
        let binary: [UInt8] = [0xff, 0xab, 0x04]
        let escaped = CollectionKey.engineKey(collection: 0, logicalKey: binary)
        #expect(escaped == [0xff, 0x00, 0xff, 0xab, 0x04])
        #expect(
            CollectionKey.split(engineKey: escaped).map { [$0.collection] + $0.logicalKey.map(UInt32.init) } == [
                0, 0xff, 0xab, 0x04,
            ])
        #expect(CollectionKey.engineKey(collection: 0, logicalKey: Array("doc".utf8)) == Array("doc".utf8))
        #expect(CollectionKey.wireKey(engineKey: escaped, collectionAware: false) == binary)
        #expect(CollectionKey.wireKey(engineKey: escaped, collectionAware: true) == [0x00] + binary)
        #expect(CollectionKey.wireKey(engineKey: key, collectionAware: true) == [0xab, 0x04, 0x64, 0x6f, 0x63])
        #expect(CollectionKey.wireKey(engineKey: Array("doc".utf8), collectionAware: true) == [0x00, 0x64, 0x6f, 0x63])
        #expect(1 + 1 + CollectionKey.maxEscapedDefaultKeyLength == Limits.maxKeyLength)
        #expect(CollectionKey.maxLogicalKeyLength(collection: 8) == 246)
        for id: UInt32 in [8, 1 << 21, UInt32.max] {
            #expect(
                1 + CollectionKey.encodePrefix(id).count + CollectionKey.maxLogicalKeyLength(collection: id)
                    <= Limits.maxKeyLength)
        }
    }
}
