import SetteeCore
import Testing

/// `CollectionSystemEvent` (ADR 0143): its keys in the system collection's space, its stored value, the DCP key /
/// value / version kv_engine's `system_event.md` defines, and which events a manifest change calls for.
@Suite struct CollectionSystemEventTests {
    /// Proves event keys sit in collection 1's space, apart from every key a client can write, and that the stored
    /// value reads back whole while junk does not.
    @Test func keysAndStoredValues() {
        let begin = CollectionSystemEvent(
            kind: .beginCollection, manifestUID: 0x1_0000_0002, scopeID: 8, collectionID: 200, maxTTL: 72_000,
            name: "mycollection")
        #expect(begin.engineKey == [0xff, 0x01, 0x00, 0xc8, 0x01])
        #expect(CollectionSystemEvent.engineKey(scope: 9) == [0xff, 0x01, 0x01, 0x09])
        #expect(CollectionSystemEvent.isSystemKey(begin.engineKey))
        // A named collection's key (0xff 0x08 …), an escaped default key (0xff 0x00 …) and a plain key are not.
        #expect(!CollectionSystemEvent.isSystemKey(CollectionKey.engineKey(collection: 8, logicalKey: [0x01])))
        #expect(!CollectionSystemEvent.isSystemKey(CollectionKey.engineKey(collection: 0, logicalKey: [0xff, 0x01])))
        #expect(!CollectionSystemEvent.isSystemKey(Array("doc".utf8)) && !CollectionSystemEvent.isSystemKey([0xff]))
        #expect(CollectionSystemEvent.decode(begin.encoded) == begin)
        #expect(CollectionSystemEvent.decode(Array(begin.encoded.prefix(20))) == nil)
        #expect(CollectionSystemEvent.decode([2] + Array(begin.encoded.dropFirst())) == nil)  // event 2 is reserved
        #expect(CollectionSystemEvent.decode(begin.encoded + [0xc3]) == nil)  // not UTF-8
    }

    /// Proves the DCP key, version and value follow kv_engine's structures: a begin event's key is the name and its
    /// value uid ‖ scope ‖ collection (‖ maxTTL at version 1), an end event has no key, scope events carry uid ‖ scope.
    @Test func dcpLayout() {
        let begin = CollectionSystemEvent(
            kind: .beginCollection, manifestUID: 2, scopeID: 0, collectionID: 8, maxTTL: 72_000, name: "mycollection")
        #expect(begin.dcpKey == Array("mycollection".utf8) && begin.dcpVersion == 1)
        #expect(begin.dcpValue == [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0x01, 0x19, 0x40])
        var noTTL = begin
        noTTL.maxTTL = 0
        #expect(noTTL.dcpVersion == 0 && noTTL.dcpValue.count == 16)
        let end = CollectionSystemEvent(kind: .endCollection, manifestUID: 3, scopeID: 9, collectionID: 8)
        #expect(end.dcpKey.isEmpty && end.dcpVersion == 0)
        #expect(end.dcpValue == [0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0, 8])
        let scope = CollectionSystemEvent(kind: .createScope, manifestUID: 1, scopeID: 9, name: "s")
        #expect(scope.dcpKey == [0x73] && scope.dcpValue == [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9])
        let drop = CollectionSystemEvent(kind: .dropScope, manifestUID: 4, scopeID: 9)
        #expect(drop.dcpKey.isEmpty && drop.dcpValue == [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 9])
    }

    /// Proves the events a manifest calls for: creates for what a vBucket lacks (none for the defaults), nothing for
    /// what it holds already whatever uid it was stamped with, a new begin when a maxTTL changed, ends then drops for
    /// what the manifest no longer lists (not for what already ended), the last stamped with the manifest's uid.
    @Test func changesBringAVBucketToTheManifest() throws {
        var m = CollectionsManifest.initial
        try m.createScope("s")  // 8
        try m.createCollection("a", inScope: "s")  // 8
        try m.createCollection("b", inScope: "_default", maxTTL: 5)  // 9
        let fresh = CollectionSystemEvent.changes(existing: [:], to: m, previousUID: 0)
        #expect(fresh.map(\.kind) == [.createScope, .beginCollection, .beginCollection])
        #expect(fresh.map(\.manifestUID) == [0, 0, m.uid])
        #expect(fresh.map(\.collectionID) == [0, 9, 8] && fresh[1].maxTTL == 5 && fresh[1].scopeID == 0)

        var held = Dictionary(uniqueKeysWithValues: fresh.map { ($0.engineKey, $0) })
        held[fresh[0].engineKey]?.manifestUID = 77
        #expect(CollectionSystemEvent.changes(existing: held, to: m, previousUID: 3).isEmpty)

        var later = m
        try later.dropScope("s")
        let drops = CollectionSystemEvent.changes(existing: held, to: later, previousUID: m.uid)
        #expect(drops.map(\.kind) == [.endCollection, .dropScope])
        #expect(drops.map(\.manifestUID) == [m.uid, later.uid] && drops[0].collectionID == 8)
        for d in drops { held[d.engineKey] = d }
        #expect(CollectionSystemEvent.changes(existing: held, to: later, previousUID: later.uid).isEmpty)
    }
}
