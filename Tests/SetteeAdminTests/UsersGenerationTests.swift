import Foundation
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

/// `usersGeneration` tells open KV connections to re-read their user's roles (ADR 0008, decision 4): it moves on every
/// path that can change the local users or their roles (a put or delete here, a peer's document with other users
/// adopted, leaving the cluster, the admin's name changing) and stays put for changes that cannot (a bucket created or
/// edited, the same users adopted again).
@Suite struct UsersGenerationTests {
    @Test func movesWhenUsersCanHaveChanged() throws {
        let source = TemporaryDirectory("admin")
        let target = TemporaryDirectory("admin")
        defer {
            source.remove()
            target.remove()
        }
        let origin = try makeRegistry(source)
        defer { _ = origin.shutdown() }
        try origin.initialize(username: "Administrator", password: "password")
        var g = origin.usersGeneration
        /// Whether the generation moved since the last call.
        func moved(_ r: NodeRegistry) -> Bool {
            defer { g = r.usersGeneration }
            return r.usersGeneration != g
        }

        try origin.createBucket(settings("demo"))
        #expect(!moved(origin))
        try origin.upsertUser(
            name: "app", fullName: "", password: "secret1", roles: [Role(name: .dataWriter, bucket: "demo")])
        #expect(moved(origin))
        try origin.upsertUser(
            name: "app", fullName: "", password: nil, roles: [Role(name: .dataReader, bucket: "demo")])
        #expect(moved(origin))
        #expect(origin.currentRoles(ofUser: "app") == [Role(name: .dataReader, bucket: "demo")])

        let joiner = try makeRegistry(target)
        defer { _ = joiner.shutdown() }
        g = joiner.usersGeneration
        try joiner.storeClusterDocument(origin.clusterDocument(), promise: joiner.epochPromise, join: true)
        #expect(moved(joiner))
        #expect(joiner.currentRoles(ofUser: "app") == [Role(name: .dataReader, bucket: "demo")])
        try origin.updateBucket(named: "demo", flushEnabled: true)
        try joiner.storeClusterDocument(origin.clusterDocument(), promise: joiner.epochPromise)
        #expect(!moved(joiner))
        try origin.deleteUser(name: "app")
        try joiner.storeClusterDocument(origin.clusterDocument(), promise: joiner.epochPromise)
        #expect(moved(joiner))
        #expect(joiner.currentRoles(ofUser: "app") == nil)

        g = origin.usersGeneration
        try origin.upsertUser(name: "ops", fullName: "", password: "secret2", roles: [])
        #expect(moved(origin))
        // The admin takes a user's name: a login by that name is the admin's now, no longer the user's.
        try origin.initialize(username: "ops", password: "password")
        #expect(moved(origin))
        #expect(origin.currentRoles(ofUser: "ops") == nil)
        try origin.leaveCluster()
        #expect(moved(origin))
    }
}
