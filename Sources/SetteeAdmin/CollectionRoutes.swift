import Hummingbird
import SetteeCore
import SetteeRegistry

/// `GET /pools/default/buckets/NAME/scopes`: the collections manifest the SDKs' collection managers read
/// (`get_all_scopes`). Every bucket has the default scope and collection only.
enum CollectionRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/pools/default/buckets/:name/scopes") { _, c in
            guard let name = bucketParameter(c), api.registry.clusterMap(bucket: name) != nil else {
                return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
            }
            return AdminResponses.bytes(.ok, DefaultCollection.manifestJSON)
        }
    }
}
