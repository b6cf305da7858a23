import Foundation
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeTestSupport
import Testing

struct Owner: DocumentModel, Equatable {
    static let documentType = "owner"
    var name: String
}

struct Photo: DocumentModel, Equatable {
    static let documentType = "photo"
    var title: String
    var width: Int
    var owner: Reference<Owner>
}

@Suite struct MappingTests {
    @Test func typedSaveFetchRelationsAndPredicates() throws {
        // Proves Codable models round-trip as documents with a `type` property, typed fetches ignore
        // other types, to-one references resolve, to-many relations come from a view, and predicate
        // queries filter typed objects.
        let db = try Database(name: "objects", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let store = ModelStore(database: db)
        let jane = try store.insert(Owner(name: "Jane"), id: "jane")
        let bob = try store.insert(Owner(name: "Bob"))
        #expect(try db.document("jane")?["type"] == "owner")
        let p1 = try store.insert(Photo(title: "harbour", width: 640, owner: jane.reference))
        _ = try store.insert(Photo(title: "city", width: 1920, owner: jane.reference))
        _ = try store.insert(Photo(title: "forest", width: 800, owner: bob.reference))
        #expect(try store.fetch(Photo.self, id: p1.id)?.model == p1.model)
        #expect(try store.fetch(Owner.self, id: p1.id) == nil)
        #expect(try store.fetch(p1.model.owner)?.model.name == "Jane")
        let janes = try store.related(Photo.self, via: "owner", to: "jane")
        #expect(Set(janes.map(\.model.title)) == ["harbour", "city"])
        let wide = try store.fetchAll(Photo.self, where: { $0.width > 700 })
        #expect(Set(wide.map(\.model.title)) == ["city", "forest"])
        #expect(try store.fetchAll(Owner.self).count == 2)
        var edited = p1
        edited.model.title = "harbour at dusk"
        let updated = try store.update(edited)
        #expect(updated.revision.generation == 2)
        #expect(throws: LiteError.self) { try store.update(edited) }  // stale revision
        try store.delete(updated)
        #expect(try store.related(Photo.self, via: "owner", to: "jane").count == 1)
    }

    @Test func changeNotificationsSayWhichObjectsChanged() async throws {
        // Proves `changes(of:)` reports inserted, updated and deleted ids of one model type only.
        let db = try Database(name: "objchanges", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let store = ModelStore(database: db)
        var it = store.changes(of: Owner.self).makeAsyncIterator()
        let o = try store.insert(Owner(name: "A"), id: "a")
        _ = try store.insert(Photo(title: "x", width: 1, owner: o.reference))  // other type: not reported
        var e = o
        e.model.name = "B"
        let u = try store.update(e)
        try store.delete(u)
        let c1 = try #require(await it.next())
        #expect(c1.inserted == ["a"] && c1.updated.isEmpty)
        let c2 = try #require(await it.next())
        #expect(c2.updated == ["a"])
        let c3 = try #require(await it.next())
        #expect(c3.deleted == ["a"])
    }
}
