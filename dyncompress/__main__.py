from dyncompress._entry import run

run()
