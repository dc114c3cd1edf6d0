{
  "targets": [
    {
      "target_name": "weft_netlink",
      "sources": [
        "src/addon.cc", "src/handle.cc", "src/handle-rtnl.cc", "src/handle-genl.cc", "src/handle-conntrack.cc",
        "src/handle-announce.cc", "src/handle-monitor.cc", "src/handle-nflog.cc", "src/handle-nft-generation.cc",
        "src/worker.cc", "src/records.cc", "src/requests.cc", "src/request-build.cc", "src/request-link.cc",
        "src/request-addr.cc", "src/request-route.cc", "src/request-neigh.cc", "src/tc.cc",
        "src/polled-socket.cc", "src/monitor.cc", "src/announce.cc", "src/conntrack.cc", "src/nflog.cc", "src/nft-generation.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!@(pkg-config --cflags-only-I libnl-route-3.0 libnl-nf-3.0 | sed 's/-I//g')"
      ],
      "libraries": ["<!@(pkg-config --libs libnl-route-3.0 libnl-nf-3.0)"],
      "defines": ["NAPI_VERSION=9", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
    }
  ]
}
